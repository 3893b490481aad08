package backend

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// OpenOptions selects how Open opens a device.
type OpenOptions struct {
	// ReadOnly opens the device without write access.
	ReadOnly bool
	// Kind forces the implementation of the device at path: "file",
	// "block", "nvme" (FDP passthrough), "zns" (ZNS passthrough), "ftl" or
	// "zoned"; "" picks one from the path's type (an image with an FTL
	// model label opens as "ftl", one with a zoned label as "zoned", an
	// NVMe namespace of the zoned command set as "zns").
	Kind string
	// MetaPath names a second device for the filesystem's metadata, for a
	// zoned device without conventional zones (a ZNS namespace), as XFS's
	// zoned mode keeps its metadata on another device. The device at path
	// must then be zoned; MetaPath (an image file, a block device or a
	// namespace, opened by its type and with the same exclusive claim)
	// must not be. Open joins them into one backend.Zoned (SplitOpener):
	// the metadata device's whole zones come first, as conventional
	// zones, then the zoned device's zones. The CLI's spelling is
	// `-o metadev=PATH` (mount) and `--metadev PATH` (mkfs).
	MetaPath string
	// Warn, if set, hears why an automatic choice fell back (an NVMe
	// namespace whose FDP setup cannot be used).
	Warn func(msg string)
}

// NVMeOpener opens an NVMe namespace with FDP passthrough. backend/nvme sets
// it from its init, so the core package does not depend on it; nil means the
// NVMe backend is not linked in.
var NVMeOpener func(path string, ro bool) (Device, error)

// ModelOpener opens an image file that carries an FDP SSD model (label in
// its last block); ok false means the file has none. backend/ftl sets it
// from its init, like NVMeOpener.
var ModelOpener func(path string, ro bool, warn func(string)) (d Device, ok bool, err error)

// ZNSOpener opens an NVMe namespace of the Zoned Namespace command set
// with passthrough; ok false means the namespace is not known to be zoned
// (another command set, or it could not be asked) and nothing is held.
// backend/nvme sets it from its init, like NVMeOpener.
var ZNSOpener func(path string, ro bool) (d Device, ok bool, err error)

// SplitOpener joins a metadata device and a zoned data device into one
// Zoned device (OpenOptions.MetaPath), which owns both from then on.
// backend/split sets it from its init, like NVMeOpener.
var SplitOpener func(meta, data Device, ro bool) (Device, error)

// ZonedOpener opens an image file formatted as an emulated zoned device
// (label in its last block); ok false means the file has none.
// backend/zoned sets it from its init, like NVMeOpener.
var ZonedOpener func(path string, ro bool) (d Device, ok bool, err error)

// openImage opens a regular file: as an emulated zoned device or a
// modelled drive when it carries their label, else as a plain File (or an
// error, with kind "ftl" or "zoned").
func openImage(path string, opts OpenOptions) (Device, error) {
	if ZonedOpener != nil {
		d, ok, err := ZonedOpener(path, opts.ReadOnly)
		if ok || err != nil {
			return d, err
		}
	}
	if opts.Kind == "zoned" {
		return nil, fmt.Errorf("device %s: not a zoned image", path)
	}
	if ModelOpener != nil {
		d, ok, err := ModelOpener(path, opts.ReadOnly, opts.Warn)
		if ok || err != nil {
			return d, err
		}
	}
	if opts.Kind == "ftl" {
		return nil, fmt.Errorf("device %s: no ftl model in this image (streamfs mkfs --ftl makes one)", path)
	}
	return wrapOpen(OpenFile(path, opts.ReadOnly))
}

var (
	nvmeBlockName = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)
	nvmeCharName  = regexp.MustCompile(`^ng[0-9]+n[0-9]+$`)
)

// Open opens the device at path. With Kind "" a regular file becomes a File,
// a block device a Block, and an NVMe namespace (/dev/nvmeXnY or the
// generic /dev/ngXnY) goes to ZNSOpener, then, when it is not zoned, to
// NVMeOpener, when they are set; a block namespace that is not zoned and
// that the NVMe backend cannot drive falls back to Block. With MetaPath,
// Open joins two devices (see OpenOptions.MetaPath).
func Open(path string, opts OpenOptions) (Device, error) {
	if opts.MetaPath != "" {
		return openSplit(path, opts)
	}
	st, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // keep "device X: no such file or directory" short
		}
		return nil, fmt.Errorf("device %s: %w", path, err)
	}
	mode := st.Mode()
	isBlock := mode.Type() == fs.ModeDevice
	isChar := mode.Type() == fs.ModeDevice|fs.ModeCharDevice
	base := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		base = resolved
	}
	base = filepath.Base(base)

	switch opts.Kind {
	case "":
	case "file", "ftl", "zoned":
		if !mode.IsRegular() {
			return nil, fmt.Errorf("device %s: kind %s needs a regular file, found %s", path, opts.Kind, describeMode(mode))
		}
		// A modelled or zoned image opens as one even with kind file: as
		// a plain file its state slots would show up as filesystem space.
		return openImage(path, opts)
	case "block":
		if !isBlock {
			return nil, fmt.Errorf("device %s: kind block needs a block device, found %s", path, describeMode(mode))
		}
		return wrapOpen(OpenBlock(path, opts.ReadOnly))
	case "nvme":
		if NVMeOpener == nil {
			return nil, fmt.Errorf("device %s: nvme backend not available", path)
		}
		return NVMeOpener(path, opts.ReadOnly)
	case "zns":
		if ZNSOpener == nil {
			return nil, fmt.Errorf("device %s: zns backend not available", path)
		}
		d, ok, err := ZNSOpener(path, opts.ReadOnly)
		if !ok && err == nil {
			err = fmt.Errorf("device %s: not a zoned namespace", path)
		}
		return d, err
	default:
		return nil, fmt.Errorf("device %s: unknown device kind %q (want file, block, nvme, zns, ftl or zoned)", path, opts.Kind)
	}

	switch {
	case mode.IsRegular():
		return openImage(path, opts)
	case isBlock:
		if nvmeBlockName.MatchString(base) {
			// A zoned namespace never falls back: its block node takes
			// writes only at the write pointers.
			if d, ok, err := openZNS(path, opts.ReadOnly); ok {
				return d, err
			}
		}
		if NVMeOpener != nil && nvmeBlockName.MatchString(base) {
			d, err := NVMeOpener(path, opts.ReadOnly)
			if err == nil {
				return d, nil
			}
			// Not FDP-capable or no passthrough: plain O_DIRECT still works.
			if opts.Warn != nil {
				opts.Warn(fmt.Sprintf("%v; using the block backend with software streams (-o backend=nvme refuses instead)", err))
			}
		}
		return wrapOpen(OpenBlock(path, opts.ReadOnly))
	case isChar && nvmeCharName.MatchString(base):
		if d, ok, err := openZNS(path, opts.ReadOnly); ok {
			return d, err
		}
		if NVMeOpener == nil {
			return nil, fmt.Errorf("device %s: NVMe generic character device, but the nvme backend is not available", path)
		}
		return NVMeOpener(path, opts.ReadOnly)
	default:
		return nil, fmt.Errorf("device %s: is %s; want an image file, a block device or an NVMe namespace", path, describeMode(mode))
	}
}

// openZNS asks ZNSOpener, when it is set, to open path as a zoned
// namespace; ok false means it is not one.
func openZNS(path string, ro bool) (d Device, ok bool, err error) {
	if ZNSOpener == nil {
		return nil, false, nil
	}
	return ZNSOpener(path, ro)
}

// openSplit opens the zoned data device at path and the metadata device at
// opts.MetaPath, and joins them (SplitOpener). Kind applies to the data
// device; the metadata device is opened by its type.
func openSplit(path string, opts OpenOptions) (Device, error) {
	meta := opts.MetaPath
	if SplitOpener == nil {
		return nil, fmt.Errorf("device %s with metadata device %s: split backend not available", path, meta)
	}
	// The same device twice would fail its own exclusive claim, with a
	// message about another mount.
	if a, err := os.Stat(path); err == nil {
		if b, err := os.Stat(meta); err == nil && os.SameFile(a, b) {
			return nil, fmt.Errorf("device %s: the metadata device is the device itself", path)
		}
	}
	dataOpts := opts
	dataOpts.MetaPath = ""
	data, err := Open(path, dataOpts)
	if err != nil {
		return nil, err
	}
	if _, ok := data.(Zoned); !ok {
		data.Close()
		return nil, fmt.Errorf("device %s: a metadata device goes with a zoned device, this one is %s", path, data.Kind())
	}
	md, err := Open(meta, OpenOptions{ReadOnly: opts.ReadOnly, Warn: opts.Warn})
	if err != nil {
		data.Close()
		return nil, fmt.Errorf("metadata device: %w", err)
	}
	if _, ok := md.(Zoned); ok {
		md.Close()
		data.Close()
		return nil, fmt.Errorf("metadata device %s is zoned (%s); it must take writes anywhere", meta, md.Kind())
	}
	d, err := SplitOpener(md, data, opts.ReadOnly)
	if err != nil {
		md.Close()
		data.Close()
		return nil, fmt.Errorf("device %s with metadata device %s: %w", path, meta, err)
	}
	return d, nil
}

// wrapOpen turns a typed (*T, error) into (Device, error) without producing
// a non-nil interface holding a nil pointer.
func wrapOpen[T Device](d T, err error) (Device, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m.Type() == fs.ModeDevice:
		return "a block device"
	case m.Type() == fs.ModeDevice|fs.ModeCharDevice:
		return "a character device"
	case m.Type() == fs.ModeNamedPipe:
		return "a named pipe"
	case m.Type() == fs.ModeSocket:
		return "a socket"
	default:
		return "a special file (" + m.Type().String() + ")"
	}
}

// IsMounted reports whether the kernel has a filesystem mounted from path.
// For a block device it also counts mounted partitions of it; for an image
// file it counts loop devices backed by the file. A mount whose source names
// path itself (a FUSE mount of the image) counts as well.
func IsMounted(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("device %s: %w", path, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false, fmt.Errorf("device %s: no device numbers in stat", path)
	}
	// The conversions below matter where stat's fields are 32-bit.
	devs := map[uint64]bool{}
	switch {
	case st.Mode().Type() == fs.ModeDevice:
		addWithPartitions(devs, uint64(sys.Rdev))
	case st.Mode().IsRegular():
		for _, d := range loopDevicesBacking(uint64(sys.Dev), uint64(sys.Ino)) {
			addWithPartitions(devs, d)
		}
	}
	names := map[string]bool{path: true}
	if abs, err := filepath.Abs(path); err == nil {
		names[abs] = true
	}
	if res, err := filepath.EvalSymlinks(path); err == nil {
		names[res] = true
	}

	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("check mounts of %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		dev, source, ok := parseMountinfo(sc.Text())
		if !ok {
			continue
		}
		if devs[dev] || names[source] {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("check mounts of %s: read mountinfo: %w", path, err)
	}
	return false, nil
}

// parseMountinfo extracts the device number and mount source of one
// /proc/self/mountinfo line (see proc(5)).
func parseMountinfo(line string) (dev uint64, source string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 10 {
		return 0, "", false
	}
	majS, minS, found := strings.Cut(fields[2], ":")
	if !found {
		return 0, "", false
	}
	maj, err1 := strconv.ParseUint(majS, 10, 32)
	mnr, err2 := strconv.ParseUint(minS, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, "", false
	}
	for i := 6; i+2 < len(fields); i++ {
		if fields[i] == "-" {
			source = unescapeMount(fields[i+2])
			break
		}
	}
	return unix.Mkdev(uint32(maj), uint32(mnr)), source, true
}

// unescapeMount undoes the kernel's octal escaping (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// addWithPartitions adds dev and the partitions sysfs lists under it.
func addWithPartitions(devs map[uint64]bool, dev uint64) {
	devs[dev] = true
	dir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(dev), unix.Minor(dev))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "partition")); err != nil {
			continue
		}
		if d, ok := readDevFile(filepath.Join(dir, e.Name(), "dev")); ok {
			devs[d] = true
		}
	}
}

// loopDevicesBacking lists the loop devices whose backing file is the inode
// (dev, ino).
func loopDevicesBacking(dev, ino uint64) []uint64 {
	matches, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []uint64
	for _, m := range matches {
		raw, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		back := strings.TrimSuffix(strings.TrimRight(string(raw), "\n"), " (deleted)")
		var st unix.Stat_t
		if err := unix.Stat(back, &st); err != nil || uint64(st.Dev) != dev || uint64(st.Ino) != ino {
			continue
		}
		if d, ok := readDevFile(filepath.Join(filepath.Dir(filepath.Dir(m)), "dev")); ok {
			out = append(out, d)
		}
	}
	return out
}

// readDevFile parses a sysfs "major:minor" file.
func readDevFile(p string) (uint64, bool) {
	raw, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	majS, minS, ok := strings.Cut(strings.TrimSpace(string(raw)), ":")
	if !ok {
		return 0, false
	}
	maj, err1 := strconv.ParseUint(majS, 10, 32)
	mnr, err2 := strconv.ParseUint(minS, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return unix.Mkdev(uint32(maj), uint32(mnr)), true
}

// WriteProtected reports whether the device or image at path cannot be
// written: a block device the kernel marks read-only (BLKROGET, as after
// `blockdev --setro` or on a write-protected disk), or an image file that
// cannot be opened for writing (a read-only filesystem, an immutable
// file). A block device opens read-write even when it is read-only and
// only its writes fail, so mount asks first and mounts read-only, as a
// kernel filesystem does. Other devices report false, and so does a path
// that cannot be looked at: Open explains that better.
func WriteProtected(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, nil
	}
	switch {
	case st.Mode().IsRegular():
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			f.Close()
			return false, nil
		}
		if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return true, nil
		}
		return false, nil
	case st.Mode().Type() == fs.ModeDevice:
		// O_RDONLY without O_EXCL: this only asks, it claims nothing.
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, nil
		}
		defer f.Close()
		ro, err := BlockReadOnly(f)
		if err != nil {
			return false, fmt.Errorf("device %s: %w", path, err)
		}
		return ro, nil
	}
	return false, nil
}

package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/ftl"
	_ "github.com/streamfs/streamfs/backend/split" // --metadev, -o metadev=
	"github.com/streamfs/streamfs/backend/zoned"
	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
)

// mkfsArgs are mkfs's flags.
type mkfsArgs struct {
	size, label, kind, ftlSpec, ftlTrace string
	zonedSpec, metaDev                   string
	agCount, blockSize                   uint
	force                                bool
}

// mkfsFlags defines mkfs's flags; --help prints their usage strings.
func mkfsFlags(stderr io.Writer) (*flag.FlagSet, *mkfsArgs) {
	f, a := newFlags("mkfs", stderr), &mkfsArgs{}
	f.StringVar(&a.size, "size", "", "image `SIZE` (K, M, G, T suffixes, powers of 1024); refused for a block device")
	f.UintVar(&a.agCount, "ag-count", 0, "`N` allocation groups (default: like mkfs.xfs)")
	f.UintVar(&a.blockSize, "block-size", 4096, "block size in `BYTES`, a power of two from 512 to 65536")
	f.StringVar(&a.label, "L", "", "the filesystem's `LABEL`")
	f.BoolVar(&a.force, "f", false, "overwrite an existing filesystem, or resize an image")
	f.BoolVar(&a.force, "force", false, "overwrite an existing filesystem, or resize an image")
	f.StringVar(&a.kind, "backend", "", "force a backend: `KIND` is file, block, nvme, zns, ftl or zoned (default: by what PATH is)")
	f.StringVar(&a.ftlSpec, "ftl", "", "model an FDP SSD in the image: `SPEC` is key=value,... (the keys below)")
	f.StringVar(&a.zonedSpec, "zoned", "", "make the image an emulated zoned device: `SPEC` is zone=SIZE,cap=SIZE,conv=N,max_open=N,max_active=N,sector=N (\"default\": 64M zones, 4 conventional, 14 open); metadata goes to the conventional zones, file data to the sequential ones")
	f.StringVar(&a.metaDev, "metadev", "", "keep the metadata on `METADEV` (an image file or a device that is not zoned) and the file data on the zoned device PATH, which then needs no conventional zones (a ZNS namespace, or --zoned conv=0,...); the metadata area is METADEV's whole zones of PATH's zone size")
	f.StringVar(&a.ftlTrace, "ftl-trace", "", "record the device's commands from mkfs on to `FILE` (streamfs waf replay)")
	return f, a
}

// Mkfs implements `streamfs mkfs`. An image file it created is removed
// again if formatting fails, so a failed mkfs leaves nothing behind.
func Mkfs(args []string, stdout, stderr io.Writer) (code int) {
	f, a := mkfsFlags(stderr)
	size, agCount, blockSize, label, force, kind, ftlSpec, ftlTrace := &a.size, &a.agCount, &a.blockSize, &a.label, &a.force, &a.kind, &a.ftlSpec, &a.ftlTrace
	pos, err := parseFlags(f, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, usageLine("mkfs"))
		return exitUsage
	}
	path := pos[0]
	var geom ftl.Geometry
	if *ftlSpec != "" {
		if geom, err = ftl.ParseGeometry(*ftlSpec); err != nil {
			fmt.Fprintf(stderr, "streamfs mkfs: --ftl: %v\n", err)
			return exitUsage
		}
	}
	if a.metaDev != "" && *ftlSpec != "" {
		fmt.Fprintln(stderr, "streamfs mkfs: --metadev goes with a zoned device, --ftl models an FDP one; give one")
		return exitUsage
	}
	var zgeom zoned.Geometry
	if a.zonedSpec != "" {
		if *ftlSpec != "" {
			fmt.Fprintln(stderr, "streamfs mkfs: --zoned and --ftl model different devices; give one")
			return exitUsage
		}
		spec := a.zonedSpec
		if spec == "default" {
			spec = ""
		}
		if zgeom, err = zoned.ParseGeometry(spec); err != nil {
			fmt.Fprintf(stderr, "streamfs mkfs: --zoned: %v\n", err)
			return exitUsage
		}
	}
	var sizeBytes int64
	if *size != "" {
		if sizeBytes, err = backend.ParseSize(*size); err != nil {
			fmt.Fprintf(stderr, "streamfs mkfs: --size: %v\n", err)
			return exitUsage
		}
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if sizeBytes == 0 {
			return fail(stderr, "mkfs", fmt.Errorf("%s does not exist (give --size to create an image file)", path))
		}
		fh, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return fail(stderr, "mkfs", err)
		}
		defer func() {
			if code != exitOK {
				_ = os.Remove(path)
			}
		}()
		err = fh.Truncate(sizeBytes) // sparse
		fh.Close()
		if err != nil {
			return fail(stderr, "mkfs", fmt.Errorf("sizing %s: %w", path, err))
		}
	case err != nil:
		return fail(stderr, "mkfs", err)
	case st.Mode()&os.ModeDevice != 0:
		if sizeBytes != 0 {
			return fail(stderr, "mkfs", fmt.Errorf("%s is a device: it has its own size, --size is refused", path))
		}
		if mounted, _ := backend.IsMounted(path); mounted {
			return fail(stderr, "mkfs", fmt.Errorf("%s is mounted; refusing to format it", path))
		}
	case st.Mode().IsRegular():
		if mounted, _ := backend.IsMounted(path); mounted {
			return fail(stderr, "mkfs", fmt.Errorf("%s is mounted; refusing to format it", path))
		}
	default:
		return fail(stderr, "mkfs", fmt.Errorf("%s is neither an image file nor a block device", path))
	}
	if *ftlSpec != "" && (st == nil || !st.Mode().IsRegular()) && !errors.Is(err, fs.ErrNotExist) {
		return fail(stderr, "mkfs", fmt.Errorf("--ftl needs an image file: the model's state lives in the image"))
	}
	if a.zonedSpec != "" && (st == nil || !st.Mode().IsRegular()) && !errors.Is(err, fs.ErrNotExist) {
		return fail(stderr, "mkfs", fmt.Errorf("--zoned needs an image file: the zones' state lives in the image"))
	}
	if a.metaDev != "" {
		if err := checkMetaDev(a.metaDev, *force, stderr); err != nil {
			return fail(stderr, "mkfs", err)
		}
	}
	// The data device alone until it is formatted: with --zoned it may not
	// be zoned yet, and a split device needs a zoned one.
	dev, err := openWaiting(path, backend.OpenOptions{Kind: *kind, Warn: warnTo(stderr, "mkfs")}, stderr, "mkfs")
	if err != nil {
		return fail(stderr, "mkfs", err)
	}
	// Closed before the deferred removal of a created image runs.
	defer func() {
		if dev != nil {
			dev.Close()
		}
	}()
	if sig := meta.Signature(dev); sig != "" && !*force {
		return fail(stderr, "mkfs", fmt.Errorf("%s already contains a filesystem (%s); use -f to overwrite it", path, sig))
	}
	if st != nil && st.Mode().IsRegular() && sizeBytes != 0 && sizeBytes != st.Size() {
		if !*force && st.Size() > 0 {
			return fail(stderr, "mkfs", fmt.Errorf("%s exists with size %d; use -f to resize it to %d", path, st.Size(), sizeBytes))
		}
		dev.Close()
		if err := os.Truncate(path, sizeBytes); err != nil {
			return fail(stderr, "mkfs", err)
		}
		if dev, err = backend.Open(path, backend.OpenOptions{Kind: *kind, Warn: warnTo(stderr, "mkfs")}); err != nil {
			return fail(stderr, "mkfs", err)
		}
	}
	// The model (or its absence) is decided here: --ftl carves its state
	// from the end of the image; without it an old model is removed so
	// that the whole image is the filesystem's again.
	if _, modelled := dev.(*ftl.Device); *ftlSpec != "" || modelled {
		dev.Close()
		if *ftlSpec != "" {
			_, err = ftl.Format(path, geom)
		} else {
			err = ftl.Unformat(path)
		}
		if err != nil {
			return fail(stderr, "mkfs", err)
		}
		if dev, err = backend.Open(path, backend.OpenOptions{Kind: *kind, Warn: warnTo(stderr, "mkfs")}); err != nil {
			return fail(stderr, "mkfs", err)
		}
	}
	// Likewise the zoned emulation: --zoned formats the image as a zoned
	// device (again, with -f); an image that is one stays one otherwise.
	if a.zonedSpec != "" {
		dev.Close()
		if _, err = zoned.FormatFile(path, zgeom); err != nil {
			return fail(stderr, "mkfs", err)
		}
		if dev, err = backend.Open(path, backend.OpenOptions{Kind: *kind, Warn: warnTo(stderr, "mkfs")}); err != nil {
			return fail(stderr, "mkfs", err)
		}
	}
	if a.metaDev != "" {
		dev.Close()
		if dev, err = backend.Open(path, backend.OpenOptions{Kind: *kind, MetaPath: a.metaDev, Warn: warnTo(stderr, "mkfs")}); err != nil {
			return fail(stderr, "mkfs", err)
		}
	}
	if *ftlTrace != "" {
		// From mkfs on, so that a replay starts where the drive did.
		if dev, err = traceDevice(dev, *ftlTrace, warnTo(stderr, "mkfs")); err != nil {
			return fail(stderr, "mkfs", err)
		}
	}
	sb, err := meta.Mkfs(dev, format.MkfsParams{BlockSize: uint32(*blockSize), AGCount: uint32(*agCount), Label: *label})
	if err != nil {
		return fail(stderr, "mkfs", err)
	}
	doc := sfs.InfoDoc{Info: sb.Info(), Backend: dev.Kind(), ZoneGeometry: sfs.ZoneGeometryOf(dev)}
	if d, ok := dev.(*ftl.Device); ok {
		// After mkfs: its whole-device discard would undo it.
		if err := d.Precondition(); err != nil {
			return fail(stderr, "mkfs", err)
		}
		l := d.Label()
		doc.Model = &l
	}
	printInfo(stdout, path, doc)
	return exitOK
}

// checkMetaDev refuses a metadata device (mkfs --metadev) that is missing,
// mounted, or holds a filesystem without -f: mkfs overwrites its start.
func checkMetaDev(path string, force bool, stderr io.Writer) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--metadev: %w", err)
	}
	if !st.Mode().IsRegular() && st.Mode()&os.ModeDevice == 0 {
		return fmt.Errorf("--metadev %s is neither an image file nor a device", path)
	}
	if mounted, _ := backend.IsMounted(path); mounted {
		return fmt.Errorf("metadata device %s is mounted; refusing to format it", path)
	}
	md, err := openWaiting(path, backend.OpenOptions{ReadOnly: true, Warn: warnTo(stderr, "mkfs")}, stderr, "mkfs")
	if err != nil {
		return fmt.Errorf("metadata device: %w", err)
	}
	defer md.Close()
	if sig := meta.Signature(md); sig != "" && !force {
		return fmt.Errorf("metadata device %s already contains a filesystem (%s); use -f to overwrite it", path, sig)
	}
	return nil
}

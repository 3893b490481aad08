// Package nvme is a streamfs Device that drives an NVMe namespace through
// the kernel's passthrough ioctls, so that every write can carry an NVMe
// Flexible Data Placement directive: write stream N is sent with the N-th
// placement identifier the namespace lists, as Linux does for its own write
// streams.
package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/backend"
)

var (
	// ErrNoFDP means the namespace cannot place data: the controller lacks
	// FDP or the endurance group has it disabled. Open of the generic kind
	// falls back to the block backend on it.
	ErrNoFDP = errors.New("nvme: flexible data placement not available")
	// ErrFormat means the namespace's LBA format is not one streamfs can
	// drive (block size other than 512 or 4096, or metadata per block).
	ErrFormat = errors.New("nvme: unsupported LBA format")
	// ErrStream means a write named a stream beyond MaxStreams.
	ErrStream = errors.New("nvme: write stream out of range")
)

const (
	pageSize = 4096
	// minPageSize stands for CAP.MPSMIN, which only the controller registers
	// show; every controller in practice has 4 KiB.
	minPageSize = 4096
	// maxChunk bounds a single command and the bounce buffers; larger MDTS
	// buy nothing measurable and pin memory per concurrent request.
	maxChunk = 1 << 20
)

// Device is an NVMe namespace driven by passthrough commands.
type Device struct {
	// c is the node commands go through (block or generic char); a
	// remount read-write replaces its descriptor. nil in unit tests
	// (submitFn).
	c     *backend.Claimed
	claim *os.File // the namespace's block node held O_EXCL when c is the char node
	path  string

	nsid      uint32
	lbaShift  uint
	lbaSize   int64
	size      int64
	chunk     int64  // bytes per command: min(MDTS, kernel limit, maxChunk)
	dsmRange  uint32 // max blocks per deallocate range, 0 = no limit
	dsmRanges int    // max ranges per Dataset Management command (DMRL)
	pids      []uint16
	info      FDPInfo

	// aio turns byte-granular requests into whole-block commands: bounce
	// buffers, and read-modify-write of partial blocks under stripe locks
	// so that neighbouring writers in one block cannot lose data.
	aio *backend.AlignedIO

	// submitFn, when set, replaces the ioctl: unit tests drive the I/O
	// paths against an in-memory controller through it.
	submitFn func(admin bool, c *passthru64, buf []byte) (uint64, error)
}

var _ backend.Device = (*Device)(nil)

func init() {
	backend.NVMeOpener = func(path string, ro bool) (backend.Device, error) {
		d, err := Open(path, ro)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	backend.ZNSOpener = func(path string, ro bool) (backend.Device, bool, error) {
		z, zonedNS, err := openZoned(path, ro)
		if err != nil {
			return nil, zonedNS, err
		}
		return z, true, nil
	}
}

var genericName = regexp.MustCompile(`^ng([0-9]+)n([0-9]+)$`)

// Open opens the NVMe namespace at path (/dev/nvmeXnY or /dev/ngXnY)
// exclusively: O_EXCL on the block node, an flock on the node opened. It
// fails with ErrNoFDP when the namespace cannot place data and with
// ErrFormat when its block size is not 512 or 4096, so that a caller can fall
// back to the block backend.
func Open(path string, ro bool) (*Device, error) {
	f, claim, err := openExclusive(path, ro)
	if err != nil {
		return nil, err
	}
	d := &Device{c: backend.NewClaimed(f, path, ro, 0), claim: claim, path: path}
	nsid, err := withFdU32(f, namespaceID)
	if err == nil {
		d.nsid = nsid
		err = d.identify()
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("device %s: %w", path, err)
	}
	d.aio = d.newAlignedIO()
	return d, nil
}

// isPartition reports a block device that sysfs lists as a partition.
func isPartition(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	rdev := uint64(sys.Rdev)
	_, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d/partition", unix.Major(rdev), unix.Minor(rdev)))
	return err == nil
}

func openExclusive(path string, ro bool) (f, claim *os.File, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("device %s: %w", path, err)
	}
	flags := unix.O_RDWR
	if ro {
		flags = unix.O_RDONLY
	}
	isBlock := st.Mode().Type() == os.ModeDevice
	isChar := st.Mode().Type() == os.ModeDevice|os.ModeCharDevice
	switch {
	case isBlock:
		// Passthrough commands address the whole namespace: on a partition
		// they would write over its neighbours and the partition table.
		if isPartition(st) {
			return nil, nil, fmt.Errorf("device %s is a partition; NVMe passthrough addresses the whole namespace (use the block backend)", path)
		}
		// O_EXCL on a block device is the kernel's exclusive claim: it fails
		// while the device is mounted or claimed by another opener.
		f, err = openFile(path, flags|unix.O_EXCL)
	case isChar:
		f, err = openFile(path, flags)
		if err == nil {
			// The generic node has no claim of its own; hold the
			// namespace's block node instead when it exists.
			claim, err = claimBlockSibling(path)
			if err != nil {
				f.Close()
				f = nil
			}
		}
	default:
		return nil, nil, fmt.Errorf("device %s: not an NVMe block or generic character device", path)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := backend.LockExclusive(f, path); err != nil {
		f.Close()
		if claim != nil {
			claim.Close()
		}
		return nil, nil, err
	}
	return f, claim, nil
}

func openFile(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("open device %s: %w: %w", path, backend.ErrBusy, err)
		}
		return nil, fmt.Errorf("open device %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// claimBlockSibling opens /dev/nvmeXnY with O_EXCL for the generic node
// /dev/ngXnY. A missing block node (hidden, or devtmpfs not populated) is no
// error: the flock on the generic node still excludes other streamfs.
func claimBlockSibling(path string) (*os.File, error) {
	base := path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		base = r
	}
	m := genericName.FindStringSubmatch(filepath.Base(base))
	if m == nil {
		return nil, nil
	}
	blk := filepath.Join(filepath.Dir(base), "nvme"+m[1]+"n"+m[2])
	st, err := os.Stat(blk)
	if err != nil || st.Mode().Type() != os.ModeDevice {
		return nil, nil
	}
	return openFile(blk, unix.O_RDONLY|unix.O_EXCL)
}

// cmd runs one passthrough command on the device's node, retrying EINTR.
func (d *Device) cmd(admin bool, c *passthru64, buf []byte) (uint64, error) {
	if d.submitFn != nil {
		return d.submitFn(admin, c, buf)
	}
	var res uint64
	err := backend.WithFd(d.c.File(), func(fd int) error {
		for {
			cc := *c
			r, err := submit(fd, admin, &cc, buf)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			res = r
			return err
		}
	})
	return res, err
}

func (d *Device) identifyCmd(cns uint8, nsid uint32, buf []byte) error {
	c := passthru64{opcode: adminIdentify, nsid: nsid, cdw10: uint32(cns)}
	if _, err := d.cmd(true, &c, buf); err != nil {
		return fmt.Errorf("identify cns %d: %w", cns, err)
	}
	return nil
}

func (d *Device) getLog(lid uint8, lsi uint16, buf []byte) error {
	c := passthru64{opcode: adminGetLogPage}
	c.cdw10, c.cdw11, c.cdw12, c.cdw13 = getLogCDW(lid, lsi, uint32(len(buf)), 0)
	if _, err := d.cmd(true, &c, buf); err != nil {
		return fmt.Errorf("get log page 0x%02x: %w", lid, err)
	}
	return nil
}

// ruhStatus lists the namespace's reclaim unit handles (I/O Management
// Receive, operation 1), growing the buffer until every descriptor fits.
func (d *Device) ruhStatus() ([]RUHStatus, error) {
	n := pageSize
	for {
		buf := backend.AlignedBuf(n)
		c := passthru64{opcode: ioMgmtRecv, nsid: d.nsid, cdw10: ioMgmtRecvRU, cdw11: uint32(n/4 - 1)}
		if _, err := d.cmd(false, &c, buf); err != nil {
			return nil, fmt.Errorf("io management receive (ruh status): %w", err)
		}
		if want := ruhStatusHdrSize + ruhStatusDescSz*int(binary.LittleEndian.Uint16(buf[14:])); want > n {
			n = (want + pageSize - 1) &^ (pageSize - 1)
			continue
		}
		return parseRUHStatus(buf)
	}
}

// identify reads what the device needs from the controller about namespace
// d.nsid: geometry, transfer limits and the FDP setup.
func (d *Device) identify() error {
	ns, ctrl, err := d.identifyBase()
	if err != nil {
		return err
	}
	return d.identifyFDP(ns, ctrl)
}

// identifyBase reads the namespace's geometry and the transfer limits,
// what every command set needs.
func (d *Device) identifyBase() (nsInfo, ctrlInfo, error) {
	nsid := d.nsid
	buf := backend.AlignedBuf(identifySize)
	if err := d.identifyCmd(cnsNamespace, nsid, buf); err != nil {
		return nsInfo{}, ctrlInfo{}, err
	}
	ns, err := parseIdentifyNS(buf)
	if err != nil {
		return nsInfo{}, ctrlInfo{}, err
	}
	if ns.lbaShift != 9 && ns.lbaShift != 12 {
		return nsInfo{}, ctrlInfo{}, fmt.Errorf("namespace %d: block size 2^%d: %w", nsid, ns.lbaShift, ErrFormat)
	}
	if ns.metaSize != 0 {
		return nsInfo{}, ctrlInfo{}, fmt.Errorf("namespace %d: %d metadata bytes per block: %w", nsid, ns.metaSize, ErrFormat)
	}
	d.lbaShift = uint(ns.lbaShift)
	d.lbaSize = 1 << ns.lbaShift
	if ns.nsze > uint64(1<<63-1)>>d.lbaShift {
		return nsInfo{}, ctrlInfo{}, fmt.Errorf("namespace %d: size %d blocks overflows", nsid, ns.nsze)
	}
	d.size = int64(ns.nsze) << d.lbaShift

	if err := d.identifyCmd(cnsController, 0, buf); err != nil {
		return nsInfo{}, ctrlInfo{}, err
	}
	ctrl, err := parseIdentifyCtrl(buf)
	if err != nil {
		return nsInfo{}, ctrlInfo{}, err
	}
	d.chunk = min(maxTransfer(ctrl.mdts, minPageSize), maxChunk)
	if k := kernelMaxTransfer(d.path); k > 0 {
		d.chunk = min(d.chunk, k)
	}
	d.chunk = max(d.chunk&^(pageSize-1), pageSize)

	// Deallocate range limit: optional structure, so failure leaves no limit.
	if err := d.identifyCmd(cnsCtrlCSINVM, 0, buf); err == nil {
		if dmrl, dmrsl, err := parseIdentifyCtrlNVM(buf); err == nil {
			d.dsmRange = dmrsl
			if dmrl > 0 {
				d.dsmRanges = int(dmrl)
			}
		}
	}
	return ns, ctrl, nil
}

// identifyFDP reads the FDP setup of the namespace's endurance group and
// its placement handles.
func (d *Device) identifyFDP(ns nsInfo, ctrl ctrlInfo) error {
	nsid := d.nsid
	if !ctrl.fdpSupported() {
		return fmt.Errorf("controller does not support FDP (CTRATT bit 19 clear): %w", ErrNoFDP)
	}
	c := passthru64{opcode: adminGetFeature, cdw10: featFDP, cdw11: uint32(ns.endgid)}
	res, err := d.cmd(true, &c, nil)
	if err != nil {
		return fmt.Errorf("get features FDP (endurance group %d): %w", ns.endgid, err)
	}
	enabled, confIdx := fdpFeature(res)
	if !enabled {
		return fmt.Errorf("FDP disabled in endurance group %d: %w", ns.endgid, ErrNoFDP)
	}
	conf, err := d.fdpConfig(ns.endgid, confIdx)
	if err != nil {
		return err
	}
	ruhs, err := d.ruhStatus()
	if err != nil {
		return err
	}
	if len(ruhs) == 0 {
		return fmt.Errorf("namespace %d lists no placement handles: %w", nsid, ErrNoFDP)
	}
	d.pids = make([]uint16, len(ruhs))
	for i, r := range ruhs {
		d.pids[i] = r.PID
	}
	d.info = FDPInfo{
		Enabled:            true,
		ConfigIndex:        confIdx,
		EnduranceGroup:     ns.endgid,
		ReclaimGroups:      conf.nrg,
		ReclaimUnitHandles: conf.nruh,
		ReclaimUnitSize:    conf.runs,
		PlacementIDs:       append([]uint16(nil), d.pids...),
		NamespaceID:        nsid,
		LBASize:            int(d.lbaSize),
		MaxTransfer:        d.chunk,
	}
	return nil
}

// fdpConfig reads the FDP configurations log of the endurance group and
// returns the configuration in use.
func (d *Device) fdpConfig(endgid uint16, idx uint8) (fdpConfig, error) {
	hdr := backend.AlignedBuf(pageSize)
	if err := d.getLog(logFDPConfigs, endgid, hdr[:16]); err != nil {
		return fdpConfig{}, err
	}
	size := int(binary.LittleEndian.Uint32(hdr[4:]))
	if size < 16 || size > 1<<20 {
		return fdpConfig{}, fmt.Errorf("fdp configurations log: implausible size %d", size)
	}
	buf := backend.AlignedBuf((size + 3) &^ 3)
	if err := d.getLog(logFDPConfigs, endgid, buf); err != nil {
		return fdpConfig{}, err
	}
	confs, err := parseFDPConfigs(buf)
	if err != nil {
		return fdpConfig{}, err
	}
	if int(idx) >= len(confs) {
		return fdpConfig{}, fmt.Errorf("fdp configuration %d in use, log lists %d", idx, len(confs))
	}
	return confs[idx], nil
}

func withFdU32(f *os.File, fn func(fd int) (uint32, error)) (uint32, error) {
	var v uint32
	err := backend.WithFd(f, func(fd int) error {
		var err error
		v, err = fn(fd)
		return err
	})
	return v, err
}

// kernelMaxTransfer reads the limits the kernel puts on one passthrough
// command, whatever MDTS says: max_hw_sectors_kb, and max_segments pages
// (a page-aligned buffer takes at most one segment per page). It returns 0
// when sysfs does not tell.
func kernelMaxTransfer(path string) int64 {
	base := path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		base = r
	}
	name := filepath.Base(base)
	if m := genericName.FindStringSubmatch(name); m != nil {
		name = "nvme" + m[1] + "n" + m[2]
	}
	queue := filepath.Join("/sys/class/block", name, "queue")
	limit := int64(0)
	if kb := readSysInt(filepath.Join(queue, "max_hw_sectors_kb")); kb > 0 {
		limit = kb << 10
	}
	if segs := readSysInt(filepath.Join(queue, "max_segments")); segs > 0 {
		if limit == 0 || segs*pageSize < limit {
			limit = segs * pageSize
		}
	}
	return limit
}

func readSysInt(p string) int64 {
	raw, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

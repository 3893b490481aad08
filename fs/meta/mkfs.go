package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
)

// Signature names a filesystem found on a device, "" if none is known.
func Signature(dev backend.Device) string {
	b := make([]byte, 128<<10)
	if int64(len(b)) > dev.Size() {
		b = b[:dev.Size()]
	}
	if err := dev.ReadAt(b, 0); err != nil {
		return ""
	}
	switch {
	case len(b) >= 8 && bytes.Equal(b[:8], format.SuperMagic[:]):
		return "streamfs"
	case len(b) >= 4 && string(b[:4]) == "XFSB":
		return "xfs"
	case len(b) >= 0x43a && binary.LittleEndian.Uint16(b[0x438:]) == 0xEF53:
		return "ext2/3/4"
	case len(b) >= 0x10048 && string(b[0x10040:0x10048]) == "_BHRfS_M":
		return "btrfs"
	}
	if sb, _, err := ReadSuper(dev); err == nil && sb != nil {
		return "streamfs" // primary destroyed, backup present
	}
	return ""
}

// Mkfs writes a new, empty filesystem to dev. On a zoned device (one with
// conventional zones first) it makes the zoned layout: metadata in the
// conventional zones, every sequential zone reset for file data.
func Mkfs(dev backend.Device, p format.MkfsParams) (*format.Super, error) {
	p.SizeBytes = dev.Size()
	zdev, zoned := dev.(backend.Zoned)
	if zoned {
		g := zdev.Geometry()
		if g.Conventional == 0 || g.Conventional >= g.Zones {
			return nil, fmt.Errorf("zoned device with %d conventional zones of %d: the metadata needs conventional zones and the data sequential ones", g.Conventional, g.Zones)
		}
		p.SizeBytes = int64(g.Conventional) * g.ZoneSize
		p.Zones = &format.ZoneLayout{DataStart: p.SizeBytes, ZoneSize: g.ZoneSize, ZoneCap: g.ZoneCap, DataZones: uint64(g.Zones - g.Conventional)}
	}
	sb, err := format.NewSuper(p)
	if err != nil {
		if zoned {
			err = fmt.Errorf("conventional zones (%d MiB) for the metadata: %w", p.SizeBytes>>20, err)
		}
		return nil, err
	}
	if zoned {
		if err := resetZones(zdev); err != nil {
			return nil, fmt.Errorf("mkfs: %w", err)
		}
	}
	bs := uint64(sb.BlockSize)
	if int(bs)%dev.SectorSize() != 0 {
		return nil, fmt.Errorf("block size %d is not a multiple of the device sector size %d", bs, dev.SectorSize())
	}
	// Discard everything first so old data cannot leak through (best effort).
	_ = dev.Discard(0, int64(sb.TotalBlocks*bs))
	zero := make([]byte, bs)
	// Old headers must not validate: wipe the reserved area, both checkpoint
	// headers and the first journal block.
	for _, blk := range []uint64{sb.CkptStart + sb.CkptBlocks, sb.JournalStart} {
		if err := dev.WriteAt(zero, int64(blk*bs), backend.StreamMeta); err != nil {
			return nil, fmt.Errorf("mkfs: %w", err)
		}
	}
	if err := dev.WriteAt(make([]byte, format.ReservedBytes), 0, backend.StreamMeta); err != nil {
		return nil, fmt.Errorf("mkfs: %w", err)
	}
	if err := initTrees(dev, sb); err != nil {
		return nil, fmt.Errorf("mkfs: %w", err)
	}
	if err := WriteSuper(dev, sb); err != nil {
		return nil, fmt.Errorf("mkfs: %w", err)
	}
	return sb, nil
}

// resetZones empties every sequential zone that holds data.
func resetZones(dev backend.Zoned) error {
	zones, err := dev.ReportZones(0, 0)
	if err != nil {
		return fmt.Errorf("zone report: %w", err)
	}
	for _, z := range zones {
		if z.Type == backend.ZoneConventional || z.Cond == backend.ZoneEmpty || z.Cond == backend.ZoneOffline || z.Cond == backend.ZoneReadOnly {
			continue
		}
		if err := dev.ZoneMgmt(backend.ZoneOpReset, z.Start); err != nil {
			return fmt.Errorf("resetting the zone at %d: %w", z.Start, err)
		}
	}
	return dev.Flush()
}

// initTrees builds the first checkpoint: every AG tree holds its AG header
// and its free space, AG 0's also the root directory.
func initTrees(dev backend.Device, sb *format.Super) error {
	s := newStore(dev, sb, Options{CacheBytes: 16 << 20}, false)
	defer s.closeCaches()
	if err := s.openTrees(make([]uint64, sb.AGCount)); err != nil {
		return err
	}
	s.ags = make([]agState, sb.AGCount)
	a, err := alloc.New(alloc.Geometry{AGCount: sb.AGCount, AGBlocks: sb.AGBlocks, TotalBlocks: sb.TotalBlocks}, alloc.Options{})
	if err != nil {
		return err
	}
	s.alloc = a
	if err := a.MarkUsed(0, sb.MetaEnd()); err != nil {
		return err
	}
	if err := a.MarkUsed(sb.BackupBlock, sb.TotalBlocks-sb.BackupBlock); err != nil {
		return err
	}
	for ag := uint64(0); ag < uint64(sb.AGCount); ag++ {
		lo := max(ag*sb.AGBlocks, sb.MetaEnd())
		hi := min((ag+1)*sb.AGBlocks, sb.BackupBlock)
		if hi > lo {
			if err := s.trees[ag].Put(format.FreeKey(lo), format.FreeVal(hi-lo)); err != nil {
				return treeErr(err)
			}
		}
		s.ags[ag].dirty = true
	}
	now := time.Now().UnixNano()
	root := format.InodeRec{Ino: RootIno, Mode: 0o40755, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
		Nlink: 2, Atime: now, Mtime: now, Ctime: now, Btime: now, Parent: RootIno, Gen: 1}
	if err := s.applyInode(&root); err != nil {
		return err
	}
	s.rotor.Store(1 % sb.AGCount)
	s.j.Start(0, 1, 1, 0) // the first checkpoint: sequence 1 in slot 0
	return s.checkpoint()
}

package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"time"

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

// Mkfs writes a new, empty filesystem to dev.
func Mkfs(dev backend.Device, p format.MkfsParams) (*format.Super, error) {
	p.SizeBytes = dev.Size()
	sb, err := format.NewSuper(p)
	if err != nil {
		return nil, err
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
		if err := dev.WriteAt(zero, int64(blk*bs), 0); err != nil {
			return nil, fmt.Errorf("mkfs: %w", err)
		}
	}
	if err := dev.WriteAt(make([]byte, format.ReservedBytes), 0, 0); err != nil {
		return nil, fmt.Errorf("mkfs: %w", err)
	}
	now := time.Now().UnixNano()
	var e format.Encoder
	e.AG(0, 2)
	e.Rotor(1 % sb.AGCount)
	e.Inode(&format.InodeRec{Ino: RootIno, Mode: 0o40755, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
		Nlink: 2, Atime: now, Mtime: now, Ctime: now, Btime: now, Parent: RootIno})
	payload := e.Buf
	h := format.CkptHeader{Seq: 1, JournalSeq: 1, JournalPos: 0, PayloadLen: uint64(len(payload)),
		PayloadCRC: format.Checksum(payload), UUID: sb.UUID}
	buf := make([]byte, 2*bs)
	copy(buf, h.Encode())
	copy(buf[bs:], payload)
	if err := dev.WriteAt(buf, int64(sb.CkptStart*bs), 0); err != nil {
		return nil, fmt.Errorf("mkfs: checkpoint: %w", err)
	}
	if err := dev.Flush(); err != nil {
		return nil, fmt.Errorf("mkfs: flush: %w", err)
	}
	if err := WriteSuper(dev, sb); err != nil {
		return nil, fmt.Errorf("mkfs: %w", err)
	}
	return sb, nil
}

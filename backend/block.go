package backend

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxBounce caps the aligned buffer one unaligned request uses; larger
// requests go through it piece by piece.
const maxBounce = 1 << 20

// Block is a Device backed by a block device opened with O_DIRECT.
type Block struct {
	c      *Claimed // the descriptor; a remount read-write replaces it
	path   string
	size   int64
	sector int64

	// aio does O_DIRECT's alignment: offsets, lengths and buffer addresses
	// must all be multiples of the logical sector size, so unaligned
	// requests go through bounce buffers and partial sectors are
	// read-modify-written under its stripe locks.
	aio *AlignedIO
}

var _ Device = (*Block)(nil)

// OpenBlock opens the block device at path with O_DIRECT|O_EXCL and takes its
// flock. O_EXCL makes the kernel refuse a device that is mounted or claimed
// by another exclusive opener; that, like a held flock, gives ErrBusy.
func OpenBlock(path string, ro bool) (*Block, error) {
	flags := os.O_RDWR
	if ro {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flags|unix.O_DIRECT|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("open device %s: %w: %w", path, ErrBusy, err)
		}
		return nil, fmt.Errorf("open device %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat device %s: %w", path, err)
	}
	if st.Mode().Type() != os.ModeDevice {
		f.Close()
		return nil, fmt.Errorf("device %s: not a block device (%s)", path, st.Mode().Type())
	}
	if err := LockExclusive(f, path); err != nil {
		f.Close()
		return nil, err
	}
	var size uint64
	var ss int
	err = WithFd(f, func(fd int) error {
		var err error
		if size, err = unix.IoctlGetUint64(fd, unix.BLKGETSIZE64); err != nil {
			return fmt.Errorf("BLKGETSIZE64: %w", err)
		}
		if ss, err = unix.IoctlGetInt(fd, unix.BLKSSZGET); err != nil {
			return fmt.Errorf("BLKSSZGET: %w", err)
		}
		return nil
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("device %s: %w", path, err)
	}
	if ss < 512 || ss > memAlign || ss&(ss-1) != 0 {
		f.Close()
		return nil, fmt.Errorf("device %s: unsupported logical sector size %d", path, ss)
	}
	b := &Block{c: NewClaimed(f, path, ro, unix.O_DIRECT), path: path, size: int64(size), sector: int64(ss)}
	b.aio = NewAlignedIO(AlignedConfig{
		BlockSize: b.sector,
		BufAlign:  ss,
		MaxPiece:  maxBounce,
		Read:      func(p []byte, off int64) error { return preadFull(b.c.File(), p, off) },
		// No hardware streams: the stream is ignored.
		Write: func(p []byte, off int64, _ uint32) error { return pwriteFull(b.c.File(), p, off) },
	})
	return b, nil
}

// ReadAt implements Device. Unaligned requests read whole sectors into a
// bounce buffer and copy out the wanted bytes.
func (b *Block) ReadAt(p []byte, off int64) error {
	if err := CheckRange("read", off, int64(len(p)), b.size); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	if err := b.aio.ReadAt(p, off); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	return nil
}

// WriteAt implements Device; the stream is ignored (no hardware streams).
// Unaligned requests go through a bounce buffer, reading the partial head
// and tail sectors first so their other bytes survive.
func (b *Block) WriteAt(p []byte, off int64, stream uint32) error {
	if b.c.ReadOnly() {
		return errReadOnly(b.path)
	}
	if err := CheckRange("write", off, int64(len(p)), b.size); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	if err := b.aio.WriteAt(p, off, stream); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	return nil
}

// Flush implements Device with fdatasync, which on a block device flushes
// the device's volatile write cache.
func (b *Block) Flush() error {
	if b.c.ReadOnly() {
		return nil
	}
	if err := fdatasync(b.c.File()); err != nil {
		return fmt.Errorf("device %s: fdatasync: %w", b.path, err)
	}
	return nil
}

// Discard issues BLKDISCARD for the whole sectors inside the range; partial
// sectors at the edges are left alone because their other bytes may be live.
// Devices without discard support make it a no-op.
func (b *Block) Discard(off, length int64) error {
	if b.c.ReadOnly() {
		return errReadOnly(b.path)
	}
	if err := CheckRange("discard", off, length, b.size); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	start, end := b.aio.AlignUp(off), b.aio.AlignDown(off+length)
	if end <= start {
		return nil
	}
	rng := [2]uint64{uint64(start), uint64(end - start)}
	err := WithFd(b.c.File(), func(fd int) error {
		for {
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKDISCARD, uintptr(unsafe.Pointer(&rng)))
			if errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				return errno
			}
			return nil
		}
	})
	if err != nil && !isNotSupported(err) {
		return fmt.Errorf("device %s: BLKDISCARD %d bytes at %d: %w", b.path, end-start, start, err)
	}
	return nil
}

// Size implements Device.
func (b *Block) Size() int64 { return b.size }

// SectorSize implements Device: the logical block size.
func (b *Block) SectorSize() int { return int(b.sector) }

// MaxStreams implements Device.
func (b *Block) MaxStreams() uint32 { return 0 }

// Kind implements Device.
func (b *Block) Kind() string { return "block" }

// MakeWritable implements Reopener: a block device opened read-only is
// opened again read-write (O_DIRECT, without O_EXCL: the first descriptor
// keeps the claim), unless the kernel marks it read-only.
func (b *Block) MakeWritable() error { return b.c.MakeWritable() }

// Close releases the device, its O_EXCL claim and its lock.
func (b *Block) Close() error { return b.c.Close() }

package backend

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// maxBounce caps the aligned buffer one unaligned request uses; larger
	// requests go through it piece by piece.
	maxBounce = 1 << 20
	// memAlign aligns bounce buffers for O_DIRECT whatever the device's DMA
	// alignment; a page satisfies every Linux block device.
	memAlign = 4096
	// lockUnit and lockStripes size the striped locks that serialise
	// read-modify-write of partial sectors against other writes.
	lockUnit    = 64 << 10
	lockStripes = 256
)

// Block is a Device backed by a block device opened with O_DIRECT.
type Block struct {
	f      *os.File
	path   string
	size   int64
	sector int64
	ro     bool

	// stripes: a partial-sector write reads, patches and rewrites whole
	// sectors, so it holds its stripes exclusively; every other write holds
	// them shared. Without this, two writers of neighbouring bytes in one
	// sector (or a whole-sector writer racing an RMW) would lose data.
	stripes [lockStripes]sync.RWMutex
	bounce  sync.Pool
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
	if err := lockExclusive(f, path); err != nil {
		f.Close()
		return nil, err
	}
	var size uint64
	var ss int
	err = withFd(f, func(fd int) error {
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
	b := &Block{f: f, path: path, size: int64(size), sector: int64(ss), ro: ro}
	b.bounce.New = func() any { buf := alignedBuf(maxBounce); return &buf }
	return b, nil
}

// alignedBuf returns n bytes starting at a memAlign boundary, carved from a
// slightly larger Go allocation.
func alignedBuf(n int) []byte {
	raw := make([]byte, n+memAlign)
	shift := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) % memAlign); r != 0 {
		shift = memAlign - r
	}
	return raw[shift : shift+n : shift+n]
}

func (b *Block) aligned(p []byte, off int64) bool {
	s := b.sector
	if off%s != 0 || int64(len(p))%s != 0 {
		return false
	}
	return len(p) == 0 || int64(uintptr(unsafe.Pointer(&p[0])))%s == 0
}

func (b *Block) alignDown(x int64) int64 { return x - x%b.sector }
func (b *Block) alignUp(x int64) int64   { return b.alignDown(x + b.sector - 1) }

// lockRange locks the stripes covering [off, end) in ascending stripe order,
// so that concurrent lockers cannot deadlock, and returns the unlock.
func (b *Block) lockRange(off, end int64, exclusive bool) func() {
	var set [lockStripes / 64]uint64
	first, last := off/lockUnit, (end-1)/lockUnit
	if last-first+1 >= lockStripes {
		for i := range set {
			set[i] = ^uint64(0)
		}
	} else {
		for u := first; u <= last; u++ {
			i := u % lockStripes
			set[i/64] |= 1 << (i % 64)
		}
	}
	for i := range lockStripes {
		if set[i/64]&(1<<(i%64)) == 0 {
			continue
		}
		if exclusive {
			b.stripes[i].Lock()
		} else {
			b.stripes[i].RLock()
		}
	}
	return func() {
		for i := range lockStripes {
			if set[i/64]&(1<<(i%64)) == 0 {
				continue
			}
			if exclusive {
				b.stripes[i].Unlock()
			} else {
				b.stripes[i].RUnlock()
			}
		}
	}
}

// ReadAt implements Device. Unaligned requests read whole sectors into a
// bounce buffer and copy out the wanted bytes.
func (b *Block) ReadAt(p []byte, off int64) error {
	if err := checkRange("read", off, int64(len(p)), b.size); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	if len(p) == 0 {
		return nil
	}
	if b.aligned(p, off) {
		if err := preadFull(b.f, p, off); err != nil {
			return fmt.Errorf("device %s: %w", b.path, err)
		}
		return nil
	}
	bp := b.bounce.Get().(*[]byte)
	defer b.bounce.Put(bp)
	buf := *bp
	end := off + int64(len(p))
	for pos := off; pos < end; {
		a0 := b.alignDown(pos)
		pend := min(end, a0+maxBounce)
		a1 := b.alignUp(pend)
		if err := preadFull(b.f, buf[:a1-a0], a0); err != nil {
			return fmt.Errorf("device %s: %w", b.path, err)
		}
		copy(p[pos-off:pend-off], buf[pos-a0:])
		pos = pend
	}
	return nil
}

// WriteAt implements Device; the stream is ignored (no hardware streams).
// Unaligned requests go through a bounce buffer, reading the partial head
// and tail sectors first so their other bytes survive.
func (b *Block) WriteAt(p []byte, off int64, _ uint32) error {
	if b.ro {
		return errReadOnly(b.path)
	}
	if err := checkRange("write", off, int64(len(p)), b.size); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	if len(p) == 0 {
		return nil
	}
	end := off + int64(len(p))
	if b.aligned(p, off) {
		unlock := b.lockRange(off, end, false)
		defer unlock()
		if err := pwriteFull(b.f, p, off); err != nil {
			return fmt.Errorf("device %s: %w", b.path, err)
		}
		return nil
	}
	bp := b.bounce.Get().(*[]byte)
	defer b.bounce.Put(bp)
	buf := *bp
	for pos := off; pos < end; {
		a0 := b.alignDown(pos)
		pend := min(end, a0+maxBounce)
		if err := b.writePiece(buf, p[pos-off:pend-off], pos); err != nil {
			return fmt.Errorf("device %s: %w", b.path, err)
		}
		pos = pend
	}
	return nil
}

// writePiece writes p at off, where the sector-aligned span around it fits
// in buf.
func (b *Block) writePiece(buf, p []byte, off int64) error {
	end := off + int64(len(p))
	a0, a1 := b.alignDown(off), b.alignUp(end)
	span := buf[:a1-a0]
	headPartial := off != a0
	tailPartial := end != a1
	unlock := b.lockRange(a0, a1, headPartial || tailPartial)
	defer unlock()
	if headPartial {
		if err := preadFull(b.f, span[:b.sector], a0); err != nil {
			return fmt.Errorf("read-modify-write: %w", err)
		}
	}
	// A one-sector span was read above already.
	if tailPartial && (!headPartial || a1-a0 > b.sector) {
		if err := preadFull(b.f, span[len(span)-int(b.sector):], a1-b.sector); err != nil {
			return fmt.Errorf("read-modify-write: %w", err)
		}
	}
	copy(span[off-a0:], p)
	return pwriteFull(b.f, span, a0)
}

// Flush implements Device with fdatasync, which on a block device flushes
// the device's volatile write cache.
func (b *Block) Flush() error {
	if b.ro {
		return nil
	}
	if err := fdatasync(b.f); err != nil {
		return fmt.Errorf("device %s: fdatasync: %w", b.path, err)
	}
	return nil
}

// Discard issues BLKDISCARD for the whole sectors inside the range; partial
// sectors at the edges are left alone because their other bytes may be live.
// Devices without discard support make it a no-op.
func (b *Block) Discard(off, length int64) error {
	if b.ro {
		return errReadOnly(b.path)
	}
	if err := checkRange("discard", off, length, b.size); err != nil {
		return fmt.Errorf("device %s: %w", b.path, err)
	}
	start, end := b.alignUp(off), b.alignDown(off+length)
	if end <= start {
		return nil
	}
	rng := [2]uint64{uint64(start), uint64(end - start)}
	err := withFd(b.f, func(fd int) error {
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

// Close releases the device, its O_EXCL claim and its lock.
func (b *Block) Close() error {
	if err := b.f.Close(); err != nil {
		return fmt.Errorf("close device %s: %w", b.path, err)
	}
	return nil
}

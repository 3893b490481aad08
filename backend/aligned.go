package backend

import (
	"fmt"
	"sync"
	"unsafe"
)

const (
	// memAlign aligns bounce buffers for direct I/O whatever the device's
	// DMA alignment: a page satisfies every Linux block device under
	// O_DIRECT, and lets the kernel map an NVMe passthrough buffer without
	// copying it.
	memAlign = 4096
	// lockUnit and lockStripes size the striped locks that serialise
	// read-modify-write of partial blocks against other writes.
	lockUnit    = 64 << 10
	lockStripes = 256
)

// AlignedBuf returns n bytes starting at a page boundary, carved from a
// slightly larger Go allocation (the Go heap never moves objects, so the
// alignment holds for the buffer's life).
func AlignedBuf(n int) []byte {
	raw := make([]byte, n+memAlign)
	shift := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) % memAlign); r != 0 {
		shift = memAlign - r
	}
	return raw[shift : shift+n : shift+n]
}

// AlignedConfig describes a device that only transfers whole, aligned
// blocks, for NewAlignedIO.
type AlignedConfig struct {
	// BlockSize is the unit of every transfer: offsets and lengths handed
	// to Read and Write are multiples of it. A power of two no larger than
	// a page (the logical sector size, the NVMe LBA size).
	BlockSize int64
	// BufAlign is the memory alignment a caller's buffer needs to go to the
	// device without a bounce copy (the sector size for O_DIRECT, a page
	// for NVMe passthrough). Bounce buffers are always page-aligned.
	BufAlign int
	// MaxPiece is the size of a bounce buffer, a multiple of BlockSize:
	// larger unaligned requests go through it piece by piece.
	MaxPiece int64
	// Read reads whole blocks into p at off.
	Read func(p []byte, off int64) error
	// Write writes whole blocks from p at off in write stream stream.
	Write func(p []byte, off int64, stream uint32) error
}

// AlignedIO gives a device that only transfers whole, aligned blocks
// byte-granular ReadAt and WriteAt: aligned requests go straight to the
// device, others through page-aligned bounce buffers, with partial head and
// tail blocks of a write read first (read-modify-write) so that their other
// bytes survive.
//
// Writes hold striped range locks: a partial-block write reads, patches and
// rewrites whole blocks, so it holds its stripes exclusively; every other
// write holds them shared. Without this, two writers of neighbouring bytes
// in one block (or a whole-block writer racing a read-modify-write) would
// lose data. Reads take no lock.
//
// Range checks are the caller's: AlignedIO assumes [off, off+len(p)) lies
// inside the device.
type AlignedIO struct {
	cfg     AlignedConfig
	stripes [lockStripes]sync.RWMutex
	bounce  sync.Pool
}

// NewAlignedIO returns an AlignedIO over the device cfg describes. It panics
// on a configuration that breaks the rules documented on AlignedConfig.
func NewAlignedIO(cfg AlignedConfig) *AlignedIO {
	bs := cfg.BlockSize
	if bs <= 0 || bs > memAlign || bs&(bs-1) != 0 || cfg.BufAlign <= 0 ||
		cfg.MaxPiece < bs || cfg.MaxPiece%bs != 0 || cfg.Read == nil || cfg.Write == nil {
		panic(fmt.Sprintf("backend: bad AlignedConfig: block %d, buffer alignment %d, piece %d", bs, cfg.BufAlign, cfg.MaxPiece))
	}
	a := &AlignedIO{cfg: cfg}
	a.bounce.New = func() any { b := AlignedBuf(int(cfg.MaxPiece)); return &b }
	return a
}

// AlignDown rounds x down to a block boundary.
func (a *AlignedIO) AlignDown(x int64) int64 { return x &^ (a.cfg.BlockSize - 1) }

// AlignUp rounds x up to a block boundary.
func (a *AlignedIO) AlignUp(x int64) int64 { return a.AlignDown(x + a.cfg.BlockSize - 1) }

// direct reports whether p can go to the device as it is: whole blocks at a
// block boundary, from suitably aligned memory.
func (a *AlignedIO) direct(p []byte, off int64) bool {
	bs := a.cfg.BlockSize
	if off&(bs-1) != 0 || int64(len(p))&(bs-1) != 0 {
		return false
	}
	return len(p) == 0 || uintptr(unsafe.Pointer(&p[0]))%uintptr(a.cfg.BufAlign) == 0
}

// lockRange locks the stripes covering [off, end) in ascending stripe order,
// so that concurrent lockers cannot deadlock, and returns the unlock.
func (a *AlignedIO) lockRange(off, end int64, exclusive bool) func() {
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
	each := func(f func(*sync.RWMutex)) {
		for i := range lockStripes {
			if set[i/64]&(1<<(i%64)) != 0 {
				f(&a.stripes[i])
			}
		}
	}
	if exclusive {
		each((*sync.RWMutex).Lock)
		return func() { each((*sync.RWMutex).Unlock) }
	}
	each((*sync.RWMutex).RLock)
	return func() { each((*sync.RWMutex).RUnlock) }
}

// ReadAt reads len(p) bytes at off. Unaligned requests read whole blocks
// into a bounce buffer and copy out the wanted bytes.
func (a *AlignedIO) ReadAt(p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	if a.direct(p, off) {
		return a.cfg.Read(p, off)
	}
	bp := a.bounce.Get().(*[]byte)
	defer a.bounce.Put(bp)
	buf := *bp
	end := off + int64(len(p))
	for pos := off; pos < end; {
		a0 := a.AlignDown(pos)
		pend := min(end, a0+a.cfg.MaxPiece)
		a1 := a.AlignUp(pend)
		if err := a.cfg.Read(buf[:a1-a0], a0); err != nil {
			return err
		}
		copy(p[pos-off:pend-off], buf[pos-a0:])
		pos = pend
	}
	return nil
}

// WriteAt writes p at off in write stream stream. Unaligned requests go
// through a bounce buffer, reading the partial head and tail blocks first so
// their other bytes survive.
func (a *AlignedIO) WriteAt(p []byte, off int64, stream uint32) error {
	if len(p) == 0 {
		return nil
	}
	end := off + int64(len(p))
	if a.direct(p, off) {
		unlock := a.lockRange(off, end, false)
		defer unlock()
		return a.cfg.Write(p, off, stream)
	}
	bp := a.bounce.Get().(*[]byte)
	defer a.bounce.Put(bp)
	buf := *bp
	for pos := off; pos < end; {
		pend := min(end, a.AlignDown(pos)+a.cfg.MaxPiece)
		if err := a.writePiece(buf, p[pos-off:pend-off], pos, stream); err != nil {
			return err
		}
		pos = pend
	}
	return nil
}

// writePiece writes p at off, where the block-aligned span around it fits in
// buf.
func (a *AlignedIO) writePiece(buf, p []byte, off int64, stream uint32) error {
	bs := a.cfg.BlockSize
	end := off + int64(len(p))
	a0, a1 := a.AlignDown(off), a.AlignUp(end)
	span := buf[:a1-a0]
	headPartial := off != a0
	tailPartial := end != a1
	unlock := a.lockRange(a0, a1, headPartial || tailPartial)
	defer unlock()
	if headPartial {
		if err := a.cfg.Read(span[:bs], a0); err != nil {
			return fmt.Errorf("read-modify-write: %w", err)
		}
	}
	// A one-block span was read above already.
	if tailPartial && (!headPartial || a1-a0 > bs) {
		if err := a.cfg.Read(span[len(span)-int(bs):], a1-bs); err != nil {
			return fmt.Errorf("read-modify-write: %w", err)
		}
	}
	copy(span[off-a0:], p)
	return a.cfg.Write(span, a0, stream)
}

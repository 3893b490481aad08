package nvme

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/streamfs/streamfs/backend"
)

// stripeLock names the lock type so lockRange can pick Lock or RLock once.
type stripeLock = sync.RWMutex

func checkRange(what string, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%s %d bytes at %d (device size %d): %w", what, n, off, size, backend.ErrOutOfRange)
	}
	return nil
}

func (d *Device) alignDown(x int64) int64 { return x &^ (d.lbaSize - 1) }
func (d *Device) alignUp(x int64) int64   { return d.alignDown(x + d.lbaSize - 1) }

// direct reports whether p can go to the controller as it is: whole blocks,
// and a page-aligned buffer so the kernel maps it without copying.
func (d *Device) direct(p []byte, off int64) bool {
	if off&(d.lbaSize-1) != 0 || int64(len(p))&(d.lbaSize-1) != 0 {
		return false
	}
	return len(p) == 0 || uintptr(unsafe.Pointer(&p[0]))%pageSize == 0
}

// placement maps a write stream to its directive: stream 0 carries none,
// stream N the N-th listed placement identifier.
func (d *Device) placement(stream uint32) (pid uint16, placed bool, err error) {
	if stream == 0 {
		return 0, false, nil
	}
	if stream > uint32(len(d.pids)) {
		return 0, false, fmt.Errorf("stream %d of %d: %w", stream, len(d.pids), ErrStream)
	}
	return d.pids[stream-1], true, nil
}

// maxInflight bounds the commands one large request keeps in flight: a
// drive needs queue depth to reach its bandwidth, and a single ioctl waits
// for its command to complete.
const maxInflight = 4

// xfer reads or writes whole blocks from buf at byte offset off, one command
// per chunk, up to maxInflight chunks at a time.
func (d *Device) xfer(op uint8, buf []byte, off int64, pid uint16, placed bool) error {
	one := func(b []byte, off int64) error {
		c := passthru64{opcode: op, nsid: d.nsid}
		c.cdw10, c.cdw11, c.cdw12, c.cdw13 = rwCDW(uint64(off)>>d.lbaShift, uint32(int64(len(b))>>d.lbaShift), pid, placed)
		if _, err := d.cmd(false, &c, b); err != nil {
			return fmt.Errorf("%s %d bytes at %d: %w", opName(op), len(b), off, err)
		}
		return nil
	}
	if int64(len(buf)) <= d.chunk {
		return one(buf, off)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, maxInflight)
	)
	for pos := int64(0); pos < int64(len(buf)); pos += d.chunk {
		b := buf[pos:min(pos+d.chunk, int64(len(buf)))]
		slots <- struct{}{}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-slots
			break
		}
		wg.Add(1)
		go func(b []byte, off int64) {
			defer wg.Done()
			defer func() { <-slots }()
			if err := one(b, off); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(b, off+pos)
	}
	wg.Wait()
	return first
}

func opName(op uint8) string {
	if op == ioWrite {
		return "write"
	}
	return "read"
}

// lockRange locks the stripes covering [off, end) in ascending stripe order,
// so that concurrent lockers cannot deadlock, and returns the unlock.
func (d *Device) lockRange(off, end int64, exclusive bool) func() {
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
	each := func(f func(*stripeLock)) {
		for i := range lockStripes {
			if set[i/64]&(1<<(i%64)) != 0 {
				f(&d.stripes[i])
			}
		}
	}
	if exclusive {
		each((*stripeLock).Lock)
		return func() { each((*stripeLock).Unlock) }
	}
	each((*stripeLock).RLock)
	return func() { each((*stripeLock).RUnlock) }
}

// ReadAt implements backend.Device. Unaligned requests read whole blocks
// into a bounce buffer and copy out the wanted bytes.
func (d *Device) ReadAt(p []byte, off int64) error {
	if err := checkRange("read", off, int64(len(p)), d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if len(p) == 0 {
		return nil
	}
	if d.direct(p, off) {
		if err := d.xfer(ioRead, p, off, 0, false); err != nil {
			return fmt.Errorf("device %s: %w", d.path, err)
		}
		return nil
	}
	bp := d.bounce.Get().(*[]byte)
	defer d.bounce.Put(bp)
	buf := *bp
	end := off + int64(len(p))
	for pos := off; pos < end; {
		a0 := d.alignDown(pos)
		pend := min(end, a0+d.chunk)
		a1 := d.alignUp(pend)
		if err := d.xfer(ioRead, buf[:a1-a0], a0, 0, false); err != nil {
			return fmt.Errorf("device %s: %w", d.path, err)
		}
		copy(p[pos-off:pend-off], buf[pos-a0:])
		pos = pend
	}
	return nil
}

// WriteAt implements backend.Device: stream N > 0 writes with the N-th
// placement identifier. Unaligned requests go through a bounce buffer,
// reading the partial head and tail blocks first so their other bytes
// survive.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	if d.ro {
		return fmt.Errorf("device %s: opened read-only", d.path)
	}
	if err := checkRange("write", off, int64(len(p)), d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	pid, placed, err := d.placement(stream)
	if err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if len(p) == 0 {
		return nil
	}
	end := off + int64(len(p))
	if d.direct(p, off) {
		unlock := d.lockRange(off, end, false)
		defer unlock()
		if err := d.xfer(ioWrite, p, off, pid, placed); err != nil {
			return fmt.Errorf("device %s: %w", d.path, err)
		}
		return nil
	}
	bp := d.bounce.Get().(*[]byte)
	defer d.bounce.Put(bp)
	buf := *bp
	for pos := off; pos < end; {
		pend := min(end, d.alignDown(pos)+d.chunk)
		if err := d.writePiece(buf, p[pos-off:pend-off], pos, pid, placed); err != nil {
			return fmt.Errorf("device %s: %w", d.path, err)
		}
		pos = pend
	}
	return nil
}

// writePiece writes p at off, where the block-aligned span around it fits in
// buf.
func (d *Device) writePiece(buf, p []byte, off int64, pid uint16, placed bool) error {
	end := off + int64(len(p))
	a0, a1 := d.alignDown(off), d.alignUp(end)
	span := buf[:a1-a0]
	headPartial := off != a0
	tailPartial := end != a1
	unlock := d.lockRange(a0, a1, headPartial || tailPartial)
	defer unlock()
	if headPartial {
		if err := d.xfer(ioRead, span[:d.lbaSize], a0, 0, false); err != nil {
			return fmt.Errorf("read-modify-write: %w", err)
		}
	}
	// A one-block span was read above already.
	if tailPartial && (!headPartial || a1-a0 > d.lbaSize) {
		if err := d.xfer(ioRead, span[len(span)-int(d.lbaSize):], a1-d.lbaSize, 0, false); err != nil {
			return fmt.Errorf("read-modify-write: %w", err)
		}
	}
	copy(span[off-a0:], p)
	return d.xfer(ioWrite, span, a0, pid, placed)
}

// Flush implements backend.Device with an NVMe Flush of the namespace.
func (d *Device) Flush() error {
	if d.ro {
		return nil
	}
	c := passthru64{opcode: ioFlush, nsid: d.nsid}
	if _, err := d.cmd(false, &c, nil); err != nil {
		return fmt.Errorf("device %s: flush: %w", d.path, err)
	}
	return nil
}

// Discard implements backend.Device with Dataset Management (deallocate) of
// the whole blocks inside the range; partial blocks at the edges are left
// alone because their other bytes may be live.
func (d *Device) Discard(off, length int64) error {
	if d.ro {
		return fmt.Errorf("device %s: opened read-only", d.path)
	}
	if err := checkRange("discard", off, length, d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	start, end := d.alignUp(off), d.alignDown(off+length)
	if end <= start {
		return nil
	}
	buf := alignedBuf(dsmMaxRanges * dsmRangeSize)
	slba, nlb := uint64(start)>>d.lbaShift, uint64(end-start)>>d.lbaShift
	for nlb > 0 {
		nr, covered := encodeDSMRanges(buf, slba, nlb, d.dsmRange)
		c := passthru64{opcode: ioDSM, nsid: d.nsid, cdw10: uint32(nr - 1), cdw11: dsmDeallocate}
		if _, err := d.cmd(false, &c, buf[:nr*dsmRangeSize]); err != nil {
			return fmt.Errorf("device %s: deallocate %d blocks at LBA %d: %w", d.path, covered, slba, err)
		}
		slba += covered
		nlb -= covered
	}
	return nil
}

// Size implements backend.Device.
func (d *Device) Size() int64 { return d.size }

// SectorSize implements backend.Device: the namespace's LBA size.
func (d *Device) SectorSize() int { return int(d.lbaSize) }

// MaxStreams implements backend.Device: one stream per placement identifier.
func (d *Device) MaxStreams() uint32 { return uint32(len(d.pids)) }

// Kind implements backend.Device.
func (d *Device) Kind() string { return "nvme" }

// Close releases the namespace, its lock and its block-node claim.
func (d *Device) Close() error {
	var err error
	if d.f != nil {
		err = d.f.Close()
	}
	if d.claim != nil {
		if cerr := d.claim.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("close device %s: %w", d.path, err)
	}
	return nil
}

// Package faulty wraps a backend.Device to inject faults for crash and error
// testing: power cuts that lose (and tear) unflushed writes, and EIO on
// chosen reads, writes and flushes.
package faulty

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"

	"github.com/streamfs/streamfs/backend"
)

// CutOptions shapes what a power cut leaves on the media.
type CutOptions struct {
	// KeepRandomPrefix keeps a random prefix (in issue order) of the writes
	// since the last completed flush, as a device whose cache had partly
	// drained would. Without it every unflushed write is lost.
	KeepRandomPrefix bool
	// TearLast lets only a prefix of the sectors of the last kept write
	// land (possibly none). With no write kept there is nothing to tear.
	TearLast bool
}

// Stats counts the operations the wrapper has let through.
type Stats struct {
	Writes   int64 // successful WriteAt calls
	Discards int64 // successful Discard calls
	Flushes  int64 // successful Flush calls
	Pending  int   // writes and discards since the last completed flush
	Cuts     int64 // power cuts
}

// record is one write or discard not yet covered by a flush, with the bytes
// it replaced so a power cut can roll it back.
type record struct {
	off int64
	old []byte
}

// Device is a fault-injecting backend.Device. It is safe for concurrent use;
// it serialises all I/O, which is fine for tests.
type Device struct {
	mu        sync.Mutex
	inner     backend.Device
	rng       *rand.Rand
	pending   []record
	off       bool // powered off by PowerCut until Revive
	closed    bool // Close was called
	innerGone bool // inner was closed too; Revive cannot undo that
	failWrite func(off, n int64) bool
	failRead  func(off, n int64) bool
	failFlush int
	stats     Stats
}

var _ backend.Device = (*Device)(nil)

// ErrPoweredOff is wrapped (together with EIO) by every I/O on a device
// between PowerCut and Revive.
var ErrPoweredOff = errors.New("device powered off")

// New wraps inner. seed makes random choices (kept prefix, tear point)
// reproducible.
func New(inner backend.Device, seed int64) *Device {
	return &Device{
		inner: inner,
		rng:   rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
	}
}

// Inner returns the wrapped device.
func (d *Device) Inner() backend.Device { return d.inner }

func (d *Device) checkOnLocked(op string) error {
	if d.closed {
		return fmt.Errorf("faulty %s: device closed: %w", op, syscall.EBADF)
	}
	if d.off {
		return fmt.Errorf("faulty %s: %w: %w", op, ErrPoweredOff, syscall.EIO)
	}
	return nil
}

// ReadAt implements backend.Device.
func (d *Device) ReadAt(p []byte, off int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("read"); err != nil {
		return err
	}
	if d.failRead != nil && d.failRead(off, int64(len(p))) {
		return fmt.Errorf("faulty read %d bytes at %d: injected: %w", len(p), off, syscall.EIO)
	}
	return d.inner.ReadAt(p, off)
}

// WriteAt implements backend.Device, saving the range's old contents first.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("write"); err != nil {
		return err
	}
	if d.failWrite != nil && d.failWrite(off, int64(len(p))) {
		return fmt.Errorf("faulty write %d bytes at %d: injected: %w", len(p), off, syscall.EIO)
	}
	if err := d.saveLocked(off, int64(len(p))); err != nil {
		return fmt.Errorf("faulty write %d bytes at %d: %w", len(p), off, err)
	}
	if err := d.inner.WriteAt(p, off, stream); err != nil {
		// The write may have partly landed; keep the record so a cut
		// still restores the old contents.
		return err
	}
	d.stats.Writes++
	return nil
}

// saveLocked records the current contents of [off, off+n).
func (d *Device) saveLocked(off, n int64) error {
	if n == 0 {
		return nil
	}
	old := make([]byte, n)
	if err := d.inner.ReadAt(old, off); err != nil {
		return fmt.Errorf("save pre-image: %w", err)
	}
	d.pending = append(d.pending, record{off: off, old: old})
	return nil
}

// Flush implements backend.Device. Only a flush that succeeds makes the
// writes before it safe from PowerCut.
func (d *Device) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("flush"); err != nil {
		return err
	}
	if d.failFlush > 0 {
		d.failFlush--
		return fmt.Errorf("faulty flush: injected: %w", syscall.EIO)
	}
	if err := d.inner.Flush(); err != nil {
		return err
	}
	d.pending = nil
	d.stats.Flushes++
	return nil
}

// Discard implements backend.Device. Like a write, an unflushed discard is
// undone by a power cut. Discards count as writes for FailWrites.
func (d *Device) Discard(off, length int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("discard"); err != nil {
		return err
	}
	if d.failWrite != nil && d.failWrite(off, length) {
		return fmt.Errorf("faulty discard %d bytes at %d: injected: %w", length, off, syscall.EIO)
	}
	// A discarded range reads as anything, so a cut may keep or undo a
	// discard; only small ones are recorded for undo (mkfs discards the
	// whole device, which would mean copying it).
	if length <= maxDiscardUndo {
		if err := d.saveLocked(off, length); err != nil {
			return fmt.Errorf("faulty discard %d bytes at %d: %w", length, off, err)
		}
	}
	if err := d.inner.Discard(off, length); err != nil {
		return err
	}
	d.stats.Discards++
	return nil
}

// maxDiscardUndo is the largest discard a power cut can undo.
const maxDiscardUndo = 64 << 20

// PowerCut simulates losing power: every write and discard issued since the
// last completed Flush is rolled back, newest first, except for a random
// prefix when opt.KeepRandomPrefix is set; with opt.TearLast only a prefix
// of the last kept write's sectors survives. The device then fails all I/O
// with EIO until Revive.
func (d *Device) PowerCut(opt CutOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return nil
	}
	d.off = true
	d.stats.Cuts++
	pending := d.pending
	d.pending = nil
	keep := 0
	if opt.KeepRandomPrefix {
		keep = d.rng.IntN(len(pending) + 1)
	}
	for i := len(pending) - 1; i >= keep; i-- {
		r := pending[i]
		if err := d.inner.WriteAt(r.old, r.off, 0); err != nil {
			return fmt.Errorf("faulty power cut: roll back %d bytes at %d: %w", len(r.old), r.off, err)
		}
	}
	if opt.TearLast && keep > 0 {
		r := pending[keep-1]
		cut := d.tearPoint(r.off, int64(len(r.old)))
		if rest := r.off + int64(len(r.old)) - cut; rest > 0 {
			if err := d.inner.WriteAt(r.old[cut-r.off:], cut, 0); err != nil {
				return fmt.Errorf("faulty power cut: tear %d bytes at %d: %w", rest, cut, err)
			}
		}
	}
	// Make the rolled-back state itself durable, so the image is what a
	// crashed machine would find even if the test process dies next.
	if err := d.inner.Flush(); err != nil {
		return fmt.Errorf("faulty power cut: %w", err)
	}
	return nil
}

// tearPoint picks where a torn write stops: the write's start (nothing
// landed) or a sector boundary strictly inside it. The write never lands
// whole: that would not be a tear.
func (d *Device) tearPoint(off, n int64) int64 {
	// Real devices write whole sectors atomically: a tear lands on the
	// inner device's sector boundaries.
	tornUnit := int64(d.inner.SectorSize())
	first := (off/tornUnit + 1) * tornUnit // first boundary after off
	end := off + n
	choices := int64(1)
	if first < end {
		choices += (end-1-first)/tornUnit + 1
	}
	k := d.rng.Int64N(choices)
	if k == 0 {
		return off
	}
	return first + (k-1)*tornUnit
}

// Revive powers the device back on after PowerCut. Injected faults stay.
func (d *Device) Revive() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.off = false
	d.closed = d.innerGone
}

// FailWrites makes every write and discard for which pred returns true fail
// with EIO without touching the media. nil stops the injection.
func (d *Device) FailWrites(pred func(off, n int64) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failWrite = pred
}

// FailReads makes every read for which pred returns true fail with EIO. nil
// stops the injection.
func (d *Device) FailReads(pred func(off, n int64) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failRead = pred
}

// FailFlushes makes the next n flushes fail with EIO; the writes they would
// have covered stay unflushed.
func (d *Device) FailFlushes(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failFlush = max(n, 0)
}

// Stats returns operation counts.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Pending = len(d.pending)
	return s
}

// Size implements backend.Device.
func (d *Device) Size() int64 { return d.inner.Size() }

// SectorSize implements backend.Device.
func (d *Device) SectorSize() int { return d.inner.SectorSize() }

// MaxStreams implements backend.Device.
func (d *Device) MaxStreams() uint32 { return d.inner.MaxStreams() }

// Kind implements backend.Device.
func (d *Device) Kind() string { return d.inner.Kind() }

// Close implements backend.Device. While powered off it leaves the inner
// device open (a crashed process's teardown does nothing to the media), so
// a test can Revive and mount the same device again; otherwise it closes
// the inner device.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	if d.off {
		return nil
	}
	d.innerGone = true
	return d.inner.Close()
}

// Package faulty wraps a backend.Device to inject the faults real devices
// have, for crash and error testing:
//
//   - power cuts (PowerCut, or CutImage for a copy) that lose unflushed
//     writes: all of them, a random prefix, or (Reorder) any subset landed
//     in any order; in-flight writes torn at sector granularity, optionally
//     leaving a sector of garbage;
//   - flushes that fail with EIO while their writes stay pending, landed, or
//     were lost (FailFlushes, InjectFlushFaults, FailNthFlush);
//   - writes that fail with EIO having written nothing, all, or some of
//     their sectors (FailWrites, InjectWriteFaults, FailNthWrite);
//   - reads that fail with EIO (FailReads).
//
// Every random choice comes from the seed given to New, so a failing run
// replays exactly as long as the caller issues the same I/O in the same
// order.
package faulty

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"

	"github.com/streamfs/streamfs/backend"
)

// CutOptions shapes what a power cut leaves on the media. The zero value
// loses every write and discard since the last completed flush.
type CutOptions struct {
	// KeepRandomPrefix keeps a random prefix (in issue order) of the writes
	// since the last completed flush, as a device whose cache had partly
	// drained in order would. Without it (and without Reorder) every
	// unflushed write is lost.
	KeepRandomPrefix bool
	// TearLast lets only part of the last write to land be written: in
	// prefix mode a sector prefix of the last kept write (possibly none of
	// it), with Reorder a random proper subset of the sectors of the write
	// the device happened to apply last. With no write landed there is
	// nothing to tear.
	TearLast bool
	// Reorder models a device that destages its volatile cache in any
	// order: any subset of the writes and discards since the last completed
	// flush lands, applied in a random order, so where landed writes
	// overlap a sector holds any one of them. The chance that a write lands
	// is itself drawn per cut, so "none" and "all" come up often enough to
	// be tested. It replaces KeepRandomPrefix.
	Reorder bool
	// TearAny, with Reorder, tears each landed write with probability 1/2
	// (a device with many commands in flight), besides the one TearLast
	// tears. Ignored without Reorder.
	TearAny bool
	// Garbage makes one sector of each torn write that did not land hold
	// random bytes instead of its old contents: the sector the device was
	// programming when the power went. In prefix mode it is the sector at
	// the tear point; with Reorder a random unlanded sector of the write.
	// Only the bytes of that sector inside the write are garbled.
	Garbage bool
	// TearUnit is the granularity of a tear in bytes; 0 (or less) means the
	// inner device's sector size, the unit real devices write atomically.
	TearUnit int
}

// FlushOutcome is what an injected fault does to one Flush call.
type FlushOutcome int

const (
	// FlushOK injects nothing: the flush goes to the device.
	FlushOK FlushOutcome = iota
	// FlushFailed returns EIO and leaves the writes it would have covered
	// unflushed: a later flush may still make them durable, a power cut
	// may lose them (what FailFlushes does).
	FlushFailed
	// FlushFailedLanded returns EIO although every write it covered is
	// durable: the flush completed but its completion was lost.
	FlushFailedLanded
	// FlushFailedLost returns EIO and drops every write it covered: the
	// media reverts now, while powered, to what the last completed flush
	// left (a device that lost its cache).
	FlushFailedLost
)

// FlushCall describes one Flush call to an InjectFlushFaults predicate.
type FlushCall struct {
	// Index counts the Flush calls made while the device was on, from 1,
	// failed ones included. It matches Stats.FlushCalls after the call.
	Index int64
	// Pending is the number of writes and discards the flush would cover.
	Pending int
}

// WriteOutcome is what an injected fault does to one WriteAt or Discard.
type WriteOutcome int

const (
	// WriteOK injects nothing.
	WriteOK WriteOutcome = iota
	// WriteFailed returns EIO without touching the media (what FailWrites
	// does).
	WriteFailed
	// WriteFailedLanded returns EIO although the write landed whole (as an
	// unflushed write: a power cut treats it like any other).
	WriteFailedLanded
	// WriteFailedPartly returns EIO with a random proper subset of the
	// write's sectors landed (possibly none); the others keep their old
	// contents. A discard lands whole: a discarded range reads as anything.
	WriteFailedPartly
	// WriteFailedGarbled is WriteFailedPartly with one unlanded sector of
	// the write holding random bytes.
	WriteFailedGarbled
)

// WriteCall describes one WriteAt or Discard call to an InjectWriteFaults
// predicate.
type WriteCall struct {
	// Index counts the WriteAt and Discard calls made while the device was
	// on, from 1, failed ones included. It matches Stats.WriteCalls after
	// the call.
	Index   int64
	Off     int64
	Len     int64
	Stream  uint32
	Discard bool
}

// ErrInjected is wrapped, together with EIO, by every error the wrapper
// injects (but not by those of a powered-off device, which wrap
// ErrPoweredOff).
var ErrInjected = errors.New("injected fault")

// Stats counts the operations the wrapper has let through.
type Stats struct {
	Writes        int64 // successful WriteAt calls
	Discards      int64 // successful Discard calls
	Flushes       int64 // successful Flush calls
	Pending       int   // writes and discards since the last completed flush
	Cuts          int64 // power cuts
	WriteCalls    int64 // WriteAt and Discard calls while on (WriteCall.Index)
	FlushCalls    int64 // Flush calls while on (FlushCall.Index)
	FailedWrites  int64 // writes and discards failed by injection
	FailedFlushes int64 // flushes failed by injection
}

// record is one write or discard not yet covered by a flush, with the bytes
// it replaced so a power cut can roll it back.
type record struct {
	off int64
	old []byte
}

// Device is a fault-injecting backend.Device. It is safe for concurrent use;
// it serialises all I/O, which is fine for tests.
//
// Lock order: mu, then whatever locks the inner device takes. Injection
// predicates run under mu and must not call the Device.
type Device struct {
	mu         sync.Mutex // guards every field below
	inner      backend.Device
	rng        *rand.Rand
	pending    []record // issue order
	off        bool     // powered off by PowerCut until Revive
	closed     bool     // Close was called
	innerGone  bool     // inner was closed too; Revive cannot undo that
	failWrite  func(off, n int64) bool
	failRead   func(off, n int64) bool
	failFlush  int
	writeFault func(WriteCall) WriteOutcome
	flushFault func(FlushCall) FlushOutcome
	stats      Stats
}

var _ backend.Device = (*Device)(nil)

// ErrPoweredOff is wrapped (together with EIO) by every I/O on a device
// between PowerCut and Revive.
var ErrPoweredOff = errors.New("device powered off")

// New wraps inner. seed makes random choices (what a cut keeps, tear points,
// garbage, partly landed writes) reproducible.
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

func injected(format string, args ...any) error {
	return fmt.Errorf("faulty "+format+": %w: %w", append(args, ErrInjected, syscall.EIO)...)
}

// ReadAt implements backend.Device.
func (d *Device) ReadAt(p []byte, off int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("read"); err != nil {
		return err
	}
	if d.failRead != nil && d.failRead(off, int64(len(p))) {
		return injected("read %d bytes at %d", len(p), off)
	}
	return d.inner.ReadAt(p, off)
}

// writeOutcomeLocked counts a write or discard call and asks the injectors
// what becomes of it.
func (d *Device) writeOutcomeLocked(c WriteCall) (WriteOutcome, error) {
	d.stats.WriteCalls++
	c.Index = d.stats.WriteCalls
	if d.failWrite != nil && d.failWrite(c.Off, c.Len) {
		return WriteFailed, nil
	}
	if d.writeFault == nil {
		return WriteOK, nil
	}
	o := d.writeFault(c)
	if o < WriteOK || o > WriteFailedGarbled {
		return WriteOK, fmt.Errorf("faulty: write fault predicate returned unknown outcome %d: %w", o, syscall.EINVAL)
	}
	return o, nil
}

// WriteAt implements backend.Device, saving the range's old contents first.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("write"); err != nil {
		return err
	}
	n := int64(len(p))
	o, err := d.writeOutcomeLocked(WriteCall{Off: off, Len: n, Stream: stream})
	if err != nil {
		return err
	}
	if o == WriteFailed {
		d.stats.FailedWrites++
		return injected("write %d bytes at %d", n, off)
	}
	if err := d.saveLocked(off, n); err != nil {
		return fmt.Errorf("faulty write %d bytes at %d: %w", n, off, err)
	}
	switch o {
	case WriteFailedPartly, WriteFailedGarbled:
		err = d.landPartlyLocked(d.inner, p, off, stream, d.sectorUnit(0), o == WriteFailedGarbled)
	default:
		err = d.inner.WriteAt(p, off, stream)
	}
	if err != nil {
		// The write may have partly landed; keep the record so a cut
		// still restores the old contents.
		return err
	}
	if o != WriteOK {
		d.stats.FailedWrites++
		return injected("write %d bytes at %d (%s)", n, off, o)
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
	d.stats.FlushCalls++
	o := FlushOK
	if d.failFlush > 0 {
		d.failFlush--
		o = FlushFailed
	} else if d.flushFault != nil {
		o = d.flushFault(FlushCall{Index: d.stats.FlushCalls, Pending: len(d.pending)})
	}
	switch o {
	case FlushOK:
		if err := d.inner.Flush(); err != nil {
			return err
		}
		d.pending = nil
		d.stats.Flushes++
		return nil
	case FlushFailed:
	case FlushFailedLanded:
		if err := d.inner.Flush(); err != nil {
			return err
		}
		d.pending = nil
	case FlushFailedLost:
		pending := d.pending
		d.pending = nil
		if err := d.resolveLocked(d.inner, pending, CutOptions{}); err != nil {
			return fmt.Errorf("faulty flush: drop unflushed writes: %w", err)
		}
		// Durable, so the reverted state is what a later crash finds.
		if err := d.inner.Flush(); err != nil {
			return fmt.Errorf("faulty flush: %w", err)
		}
	default:
		return fmt.Errorf("faulty: flush fault predicate returned unknown outcome %d: %w", o, syscall.EINVAL)
	}
	d.stats.FailedFlushes++
	return injected("flush (%s)", o)
}

// Discard implements backend.Device. Like a write, an unflushed discard is
// undone by a power cut. Discards count as writes for FailWrites and
// InjectWriteFaults.
func (d *Device) Discard(off, length int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOnLocked("discard"); err != nil {
		return err
	}
	o, err := d.writeOutcomeLocked(WriteCall{Off: off, Len: length, Discard: true})
	if err != nil {
		return err
	}
	if o == WriteFailed {
		d.stats.FailedWrites++
		return injected("discard %d bytes at %d", length, off)
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
	if o != WriteOK {
		d.stats.FailedWrites++
		return injected("discard %d bytes at %d (%s)", length, off, o)
	}
	d.stats.Discards++
	return nil
}

// maxDiscardUndo is the largest discard a power cut can undo.
const maxDiscardUndo = 64 << 20

// PowerCut simulates losing power: what opt allows of the writes and
// discards issued since the last completed Flush stays on the media, the
// rest is rolled back (see CutOptions). The result is flushed on the inner
// device, and the device then fails all I/O with EIO until Revive.
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
	if err := d.resolveLocked(d.inner, pending, opt); err != nil {
		return fmt.Errorf("faulty power cut: %w", err)
	}
	// Make the rolled-back state itself durable, so the image is what a
	// crashed machine would find even if the test process dies next.
	if err := d.inner.Flush(); err != nil {
		return fmt.Errorf("faulty power cut: %w", err)
	}
	return nil
}

// CutImage returns a fresh in-memory copy of what a power cut with opt
// would leave on the media now, and leaves the device itself running: a
// test can take crash images at many points of one workload and mount each.
// It draws from the same random source as PowerCut, so it changes what
// later random choices are (reproducibly). After a PowerCut it copies the
// media as the cut left it.
func (d *Device) CutImage(opt CutOptions) (*Mem, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.innerGone {
		return nil, fmt.Errorf("faulty cut image: device closed: %w", syscall.EBADF)
	}
	m, err := CopyToMem(d.inner)
	if err != nil {
		return nil, fmt.Errorf("faulty cut image: %w", err)
	}
	if err := d.resolveLocked(m, d.pending, opt); err != nil {
		return nil, fmt.Errorf("faulty cut image: %w", err)
	}
	return m, nil
}

// Revive powers the device back on after PowerCut. Injected faults stay.
func (d *Device) Revive() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.off = false
	d.closed = d.innerGone
}

// FailWrites makes every write and discard for which pred returns true fail
// with EIO without touching the media. nil stops the injection. It is
// checked before InjectWriteFaults.
func (d *Device) FailWrites(pred func(off, n int64) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failWrite = pred
}

// InjectWriteFaults calls pred for every WriteAt and Discard (unless
// FailWrites already failed it) and applies the outcome it returns. nil
// stops the injection. To stay reproducible, pred should decide from the
// call alone or from its own seeded random source.
func (d *Device) InjectWriteFaults(pred func(WriteCall) WriteOutcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeFault = pred
}

// FailNthWrite makes the nth WriteAt or Discard from now (1 is the next)
// have outcome o; it replaces any InjectWriteFaults predicate.
func (d *Device) FailNthWrite(n int64, o WriteOutcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := d.stats.WriteCalls + n
	d.writeFault = func(c WriteCall) WriteOutcome {
		if c.Index == at {
			return o
		}
		return WriteOK
	}
}

// FailReads makes every read for which pred returns true fail with EIO. nil
// stops the injection.
func (d *Device) FailReads(pred func(off, n int64) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failRead = pred
}

// FailFlushes makes the next n flushes fail with EIO; the writes they would
// have covered stay unflushed (FlushFailed). It is checked before
// InjectFlushFaults.
func (d *Device) FailFlushes(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failFlush = max(n, 0)
}

// InjectFlushFaults calls pred for every Flush (unless FailFlushes already
// failed it) and applies the outcome it returns. nil stops the injection.
func (d *Device) InjectFlushFaults(pred func(FlushCall) FlushOutcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushFault = pred
}

// FailNthFlush makes the nth Flush from now (1 is the next) have outcome o;
// it replaces any InjectFlushFaults predicate.
func (d *Device) FailNthFlush(n int64, o FlushOutcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at := d.stats.FlushCalls + n
	d.flushFault = func(c FlushCall) FlushOutcome {
		if c.Index == at {
			return o
		}
		return FlushOK
	}
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

// MakeWritable implements backend.Reopener for the inner device.
func (d *Device) MakeWritable() error { return backend.MakeWritable(d.inner) }

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

// String names the outcome in error messages.
func (o FlushOutcome) String() string {
	switch o {
	case FlushOK:
		return "ok"
	case FlushFailed:
		return "writes still unflushed"
	case FlushFailedLanded:
		return "writes landed"
	case FlushFailedLost:
		return "writes lost"
	}
	return fmt.Sprintf("FlushOutcome(%d)", int(o))
}

// String names the outcome in error messages.
func (o WriteOutcome) String() string {
	switch o {
	case WriteOK:
		return "ok"
	case WriteFailed:
		return "nothing written"
	case WriteFailedLanded:
		return "landed whole"
	case WriteFailedPartly:
		return "landed partly"
	case WriteFailedGarbled:
		return "landed partly, a sector garbled"
	}
	return fmt.Sprintf("WriteOutcome(%d)", int(o))
}

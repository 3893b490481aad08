package zoned

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/streamfs/streamfs/backend"
)

// Counters are what the device counts, in bytes unless named otherwise.
// They are saved with the write pointers, so a crash loses at most the
// counts since the last save.
type Counters struct {
	HostBytes   uint64 `json:"host_bytes"`   // every byte written: WriteAt and Append
	ConvBytes   uint64 `json:"conv_bytes"`   // of those, to conventional zones
	AppendBytes uint64 `json:"append_bytes"` // of those, by zone append
	MetaBytes   uint64 `json:"meta_bytes"`   // of those, tagged backend.StreamMeta
	// ReclaimBytes are the written bytes a reset gave back: the zone's
	// write pointer at the reset, live and dead data alike.
	ReclaimBytes uint64 `json:"reclaim_bytes"`
	Resets       uint64 `json:"resets"` // resets of a zone that was not empty
	Finishes     uint64 `json:"finishes"`
	// FinishBytes is the capacity finishes gave up unwritten.
	FinishBytes uint64 `json:"finish_bytes"`
	// ImplicitCloses counts open zones the device closed to open another.
	ImplicitCloses uint64 `json:"implicit_closes"`
	Saves          uint64 `json:"saves"` // state saves since format
}

func (c Counters) fields() [nCounters]uint64 {
	return [nCounters]uint64{c.HostBytes, c.ConvBytes, c.AppendBytes, c.MetaBytes, c.ReclaimBytes,
		c.Resets, c.Finishes, c.FinishBytes, c.ImplicitCloses, c.Saves}
}

func countersFrom(f [nCounters]uint64) Counters {
	return Counters{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]}
}

// counters are the live Counters, updated without a lock.
type counters [nCounters]atomic.Uint64

const (
	cHost = iota
	cConv
	cAppend
	cMeta
	cReclaim
	cResets
	cFinishes
	cFinishBytes
	cImplicitCloses
	cSaves
)

func (c *counters) load() Counters {
	var f [nCounters]uint64
	for i := range f {
		f[i] = c[i].Load()
	}
	return countersFrom(f)
}

// zone is one zone's live state. st packs the written length and the
// condition into one word (written<<8 | cond), so a save reads both
// consistently without the zone's lock.
type zone struct {
	// mu serialises the writes and actions of this zone: a sequential
	// zone is written in order, so holding it across the data write costs
	// nothing a drive would not cost. Lock order: zone.mu, then
	// Device.saveMu, then Device.limMu; another zone's mu is only ever
	// TryLocked under limMu.
	mu    sync.Mutex
	start int64
	conv  bool
	st    atomic.Uint64
}

func pack(written int64, c backend.ZoneCond) uint64 { return uint64(written)<<8 | uint64(c) }

func (z *zone) load() (written int64, c backend.ZoneCond) {
	v := z.st.Load()
	return int64(v >> 8), backend.ZoneCond(v & 0xff)
}

// Device is a zoned image: a backend.Zoned over an image file (or any
// backend.Device holding a Format'ed image, which is how the crash tests
// drive it). Nothing on the data path takes a device-wide lock: writes hold
// their zone's lock, and only a change of open or active zones takes limMu.
type Device struct {
	media backend.Device
	path  string
	ro    atomic.Bool // opened read-only; cleared once by MakeWritable
	label Label
	geo   Geometry
	cap   int64
	zones []zone
	ctr   counters

	// gen counts changes of the saved state (write pointers, full flags);
	// Flush saves only when it moved.
	gen atomic.Uint64

	// limMu guards the limit accounting: open, active and implicit.
	limMu    sync.Mutex
	open     int   // zones implicitly or explicitly open
	active   int   // open or closed zones
	implicit []int // implicitly open zones, oldest opened first

	saveMu   sync.Mutex // serialises saves; guards seq and savedGen
	seq      uint64
	savedGen uint64
	broken   atomic.Pointer[error] // the save error that broke the device
}

var (
	_ backend.Zoned    = (*Device)(nil)
	_ backend.Reopener = (*Device)(nil)
)

func init() {
	backend.ZonedOpener = func(path string, ro bool) (backend.Device, bool, error) {
		d, ok, err := Open(path, ro)
		if err != nil || !ok {
			return nil, ok, err
		}
		return d, true, nil
	}
}

// Open opens the zoned image at path; ok is false (and the file closed)
// when it carries no zoned label.
func Open(path string, ro bool) (d *Device, ok bool, err error) {
	f, err := backend.OpenFile(path, ro)
	if err != nil {
		return nil, false, err
	}
	d, ok, err = Load(f, ro)
	if err != nil || !ok {
		f.Close()
		if err != nil {
			err = fmt.Errorf("device %s: %w", path, err)
		}
		return nil, ok, err
	}
	d.path = path
	return d, true, nil
}

// FormatFile formats the image file at path with geometry g.
func FormatFile(path string, g Geometry) (Label, error) {
	f, err := backend.OpenFile(path, false)
	if err != nil {
		return Label{}, err
	}
	l, err := Format(f, g)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return Label{}, fmt.Errorf("device %s: %w", path, err)
	}
	return l, nil
}

// Load opens the zoned image held by media, which it owns from then on
// (Close closes it). ok is false when media has no zoned label. Zones that
// were open when the image was last used come back closed, as a drive's do
// after a power cycle.
func Load(media backend.Device, ro bool) (d *Device, ok bool, err error) {
	l, ok, err := readLabel(media)
	if err != nil || !ok {
		return nil, ok, err
	}
	seq, s, err := loadState(media, l)
	if err != nil {
		return nil, true, err
	}
	g := l.Geometry
	d = &Device{media: media, path: media.Kind() + " media", label: l, geo: g, cap: g.Cap(),
		zones: make([]zone, l.Zones), seq: seq}
	d.ro.Store(ro)
	for i := range d.zones {
		z := &d.zones[i]
		z.start = int64(i) * g.ZoneSize
		z.conv = i < g.Conv
		var c backend.ZoneCond
		switch {
		case z.conv:
			c = backend.ZoneNotWP
		case s.full[i]:
			c = backend.ZoneFull
		case s.fill[i] == 0:
			c = backend.ZoneEmpty
		default:
			c = backend.ZoneClosed
			d.active++
		}
		z.st.Store(pack(s.fill[i], c))
	}
	for i, v := range s.ctr.fields() {
		d.ctr[i].Store(v)
	}
	if g.MaxActive > 0 && d.active > g.MaxActive {
		return nil, true, fmt.Errorf("zoned image: %d closed zones beyond max_active %d: %w", d.active, g.MaxActive, ErrState)
	}
	return d, true, nil
}

// Label returns the image's label.
func (d *Device) Label() Label { return d.label }

// Geometry implements backend.Zoned.
func (d *Device) Geometry() backend.ZoneGeometry {
	return backend.ZoneGeometry{ZoneSize: d.geo.ZoneSize, ZoneCap: d.cap, Zones: len(d.zones),
		Conventional: d.geo.Conv, MaxOpen: d.geo.MaxOpen, MaxActive: d.geo.MaxActive}
}

// Counters returns the live counters.
func (d *Device) Counters() Counters { return d.ctr.load() }

func (d *Device) errf(format string, a ...any) error {
	return fmt.Errorf("device %s: "+format, append([]any{d.path}, a...)...)
}

// zoneAt returns the zone holding off, which must be inside the device.
func (d *Device) zoneAt(off int64) *zone { return &d.zones[off/d.geo.ZoneSize] }

// zoneStart returns the sequential zone starting at off.
func (d *Device) zoneStart(off int64) (*zone, error) {
	if off < 0 || off >= d.Size() || off%d.geo.ZoneSize != 0 {
		return nil, d.errf("offset %d is not a zone start: %w", off, backend.ErrZoneState)
	}
	z := d.zoneAt(off)
	if z.conv {
		return nil, d.errf("zone at %d: %w", off, backend.ErrZoneConventional)
	}
	return z, nil
}

func (d *Device) report(z *zone) backend.Zone {
	w, c := z.load()
	r := backend.Zone{Start: z.start, Len: d.geo.ZoneSize, Cap: d.cap, Type: backend.ZoneSeqWriteRequired, Cond: c}
	switch {
	case z.conv:
		r.Type, r.Cap, r.WP = backend.ZoneConventional, d.geo.ZoneSize, z.start
	case c == backend.ZoneFull:
		r.WP = z.start + d.cap
	default:
		r.WP = z.start + w
	}
	return r
}

// ReportZones implements backend.Zoned.
func (d *Device) ReportZones(off int64, max int) ([]backend.Zone, error) {
	if off < 0 || off >= d.Size() {
		return nil, d.errf("report zones from %d: %w", off, backend.ErrOutOfRange)
	}
	first := int(off / d.geo.ZoneSize)
	n := len(d.zones) - first
	if max > 0 && max < n {
		n = max
	}
	out := make([]backend.Zone, n)
	for i := range out {
		out[i] = d.report(&d.zones[first+i])
	}
	return out, nil
}

// ReadAt implements backend.Device. Bytes past a sequential zone's write
// pointer read as zeroes whatever the media holds there.
func (d *Device) ReadAt(p []byte, off int64) error {
	if err := backend.CheckRange("read", off, int64(len(p)), d.Size()); err != nil {
		return d.errf("%w", err)
	}
	// The write pointers are read before the data: whatever lies below
	// them was written before this read began.
	end := off + int64(len(p))
	type cut struct{ from, to int64 }
	var zero []cut
	for zs := off / d.geo.ZoneSize * d.geo.ZoneSize; zs < end; zs += d.geo.ZoneSize {
		z := d.zoneAt(zs)
		if z.conv {
			continue
		}
		w, _ := z.load()
		if lo, hi := max(zs+w, off), min(zs+d.geo.ZoneSize, end); lo < hi {
			zero = append(zero, cut{lo, hi})
		}
	}
	if err := d.media.ReadAt(p, off); err != nil {
		return d.errf("%w", err)
	}
	for _, c := range zero {
		clear(p[c.from-off : c.to-off])
	}
	return nil
}

// WriteAt implements backend.Device: anywhere in conventional zones (a
// write may span several), in a sequential zone only at its write pointer,
// in whole sectors, within the zone's capacity.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	if d.ro.Load() {
		return d.errf("opened read-only: %w", syscall.EROFS)
	}
	if err := backend.CheckRange("write", off, int64(len(p)), d.Size()); err != nil {
		return d.errf("%w", err)
	}
	if len(p) == 0 {
		return nil
	}
	if err := d.failed(); err != nil {
		return err
	}
	end := off + int64(len(p))
	convEnd := int64(d.geo.Conv) * d.geo.ZoneSize
	if end <= convEnd {
		if err := d.media.WriteAt(p, off, stream); err != nil {
			return d.errf("%w", err)
		}
		d.count(int64(len(p)), stream, cConv)
		return nil
	}
	z := d.zoneAt(off)
	if z.conv || (end-1)/d.geo.ZoneSize != off/d.geo.ZoneSize {
		return d.errf("write %d bytes at %d: %w", len(p), off, backend.ErrZoneBoundary)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	_, err := d.writeLocked(z, p, off, stream)
	return err
}

// Append implements backend.Zoned: p goes to the write pointer of the zone
// starting at zoneOff, and the offset it landed at comes back.
func (d *Device) Append(p []byte, zoneOff int64, stream uint32) (int64, error) {
	if d.ro.Load() {
		return 0, d.errf("opened read-only: %w", syscall.EROFS)
	}
	z, err := d.zoneStart(zoneOff)
	if err != nil {
		return 0, err
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	at, err := d.writeLocked(z, p, -1, stream)
	if err == nil {
		d.ctr[cAppend].Add(uint64(len(p)))
	}
	return at, err
}

// writeLocked writes p at z's write pointer, which must be off unless off
// is -1 (an append), opening the zone first if it must; z.mu is held.
func (d *Device) writeLocked(z *zone, p []byte, off int64, stream uint32) (int64, error) {
	w, c := z.load()
	at := z.start + w
	if err := d.failed(); err != nil {
		return 0, err
	}
	if c == backend.ZoneFull {
		return 0, d.errf("write %d bytes to zone %d: %w", len(p), z.start/d.geo.ZoneSize, backend.ErrZoneFull)
	}
	if off >= 0 && off != at {
		return 0, d.errf("write %d bytes at %d, zone %d's write pointer at %d: %w",
			len(p), off, z.start/d.geo.ZoneSize, at, backend.ErrZoneInvalidWrite)
	}
	if len(p)%d.geo.Sector != 0 {
		return 0, d.errf("write %d bytes at %d: not whole %d-byte sectors: %w", len(p), at, d.geo.Sector, backend.ErrZoneInvalidWrite)
	}
	if w+int64(len(p)) > d.cap {
		return 0, d.errf("write %d bytes at %d: zone %d has %d bytes left: %w",
			len(p), at, z.start/d.geo.ZoneSize, d.cap-w, backend.ErrZoneBoundary)
	}
	if len(p) == 0 {
		return at, nil
	}
	if c == backend.ZoneEmpty || c == backend.ZoneClosed {
		if err := d.acquire(z, w, c, backend.ZoneImplicitOpen); err != nil {
			return 0, d.errf("write to zone %d: %w", z.start/d.geo.ZoneSize, err)
		}
		c = backend.ZoneImplicitOpen
	}
	// A failed write leaves the write pointer where it was: the bytes
	// it may have put past it read as zeroes and are written over next.
	if err := d.media.WriteAt(p, at, stream); err != nil {
		return 0, d.errf("%w", err)
	}
	w += int64(len(p))
	if w == d.cap {
		d.release(z, w, c, backend.ZoneFull)
	} else {
		z.st.Store(pack(w, c)) // the condition stays: no limMu needed
	}
	d.gen.Add(1)
	d.count(int64(len(p)), stream, -1)
	return at, nil
}

func (d *Device) count(n int64, stream uint32, extra int) {
	d.ctr[cHost].Add(uint64(n))
	if extra >= 0 {
		d.ctr[extra].Add(uint64(n))
	}
	if stream == backend.StreamMeta {
		d.ctr[cMeta].Add(uint64(n))
	}
}

// acquire takes the open and active resources zone z needs to go from
// condition from to the open condition to, and stores the condition with
// written length w (z.mu held). At the open limit it closes the oldest
// implicitly open zone it can, as a drive does; with none to close the
// action fails. Every change of condition is stored under limMu, so a save
// that reads the zones under it sees no more active zones than the limit.
func (d *Device) acquire(z *zone, w int64, from, to backend.ZoneCond) error {
	d.limMu.Lock()
	defer d.limMu.Unlock()
	needActive := !from.Active()
	needOpen := !from.Open()
	if needActive && d.geo.MaxActive > 0 && d.active >= d.geo.MaxActive {
		return fmt.Errorf("%d of %d active: %w", d.active, d.geo.MaxActive, backend.ErrTooManyActive)
	}
	if needOpen && d.geo.MaxOpen > 0 && d.open >= d.geo.MaxOpen && !d.closeImplicitLocked(z) {
		return fmt.Errorf("%d of %d open, none implicitly: %w", d.open, d.geo.MaxOpen, backend.ErrTooManyOpen)
	}
	if needActive {
		d.active++
	}
	if needOpen {
		d.open++
	}
	if from == backend.ZoneImplicitOpen && to != backend.ZoneImplicitOpen {
		d.dropImplicitLocked(z)
	}
	if to == backend.ZoneImplicitOpen && from != backend.ZoneImplicitOpen {
		d.implicit = append(d.implicit, d.index(z))
	}
	z.st.Store(pack(w, to))
	return nil
}

// release gives back the resources of a zone leaving condition from for
// to, empty or full, which hold none, and stores the condition with
// written length w; z.mu is held.
func (d *Device) release(z *zone, w int64, from, to backend.ZoneCond) {
	d.limMu.Lock()
	defer d.limMu.Unlock()
	d.releaseLocked(z, from, false)
	z.st.Store(pack(w, to))
}

// releaseLocked gives back what from holds; keepActive keeps the active
// resource (open → closed). limMu is held.
func (d *Device) releaseLocked(z *zone, from backend.ZoneCond, keepActive bool) {
	if from.Open() {
		d.open--
	}
	if from.Active() && !keepActive {
		d.active--
	}
	if from == backend.ZoneImplicitOpen {
		d.dropImplicitLocked(z)
	}
}

func (d *Device) index(z *zone) int { return int(z.start / d.geo.ZoneSize) }

func (d *Device) dropImplicitLocked(z *zone) {
	i := d.index(z)
	for k, v := range d.implicit {
		if v == i {
			d.implicit = append(d.implicit[:k], d.implicit[k+1:]...)
			return
		}
	}
}

// closeImplicitLocked closes the oldest implicitly open zone other than
// self whose lock is free (a zone in the middle of a write stays open)
// and reports whether it found one. limMu is held; the victim's lock is
// only tried, never waited for, so the lock order cannot invert.
func (d *Device) closeImplicitLocked(self *zone) bool {
	for _, i := range d.implicit {
		v := &d.zones[i]
		if v == self || !v.mu.TryLock() {
			continue
		}
		w, c := v.load()
		if c == backend.ZoneImplicitOpen {
			// Opened by a write that then failed: nothing written, so
			// it goes back to empty and gives back its active resource.
			next := backend.ZoneClosed
			if w == 0 {
				next = backend.ZoneEmpty
			}
			d.releaseLocked(v, c, next == backend.ZoneClosed)
			v.st.Store(pack(w, next))
			d.ctr[cImplicitCloses].Add(1)
			v.mu.Unlock()
			return true
		}
		v.mu.Unlock()
	}
	return false
}

// ZoneMgmt implements backend.Zoned with the transitions of the ZNS
// specification (and Linux's null_blk): reset empties any zone; finish
// fills it; open makes it explicitly open, taking open and active
// resources; close gives back its open resource (an unwritten zone goes
// back to empty). Reset and finish are saved before they return, as a
// drive's are durable when they complete.
func (d *Device) ZoneMgmt(op backend.ZoneOp, off int64) error {
	if d.ro.Load() {
		return d.errf("opened read-only: %w", syscall.EROFS)
	}
	z, err := d.zoneStart(off)
	if err != nil {
		return fmt.Errorf("zone %s: %w", op, err)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	w, c := z.load()
	zi := d.index(z)
	bad := func() error {
		return d.errf("zone %s of zone %d (%s): %w", op, zi, c, backend.ErrZoneState)
	}
	if err := d.failed(); err != nil {
		return err
	}
	switch op {
	case backend.ZoneOpReset:
		if c == backend.ZoneEmpty {
			return nil
		}
		d.release(z, 0, c, backend.ZoneEmpty)
		d.gen.Add(1)
		d.ctr[cResets].Add(1)
		d.ctr[cReclaim].Add(uint64(w))
		// Saved before the data goes: no saved state claims discarded
		// data. The discard only gives the image's space back (reads past
		// the write pointer are zeroes anyway), so its failure is not the
		// reset's.
		if err := d.save(false); err != nil {
			return d.errf("zone reset of zone %d: %w", zi, err)
		}
		_ = d.media.Discard(z.start, d.geo.ZoneSize)
		return nil
	case backend.ZoneOpFinish:
		switch c {
		case backend.ZoneFull:
			return nil
		case backend.ZoneEmpty:
			// An empty zone passes through an active condition on its
			// way to full (ZNS 2.1, and null_blk checks it too).
			d.limMu.Lock()
			over := d.geo.MaxActive > 0 && d.active >= d.geo.MaxActive
			if !over {
				z.st.Store(pack(w, backend.ZoneFull))
			}
			d.limMu.Unlock()
			if over {
				return d.errf("zone finish of zone %d: %w", zi, backend.ErrTooManyActive)
			}
		default:
			d.release(z, w, c, backend.ZoneFull)
		}
		d.gen.Add(1)
		d.ctr[cFinishes].Add(1)
		d.ctr[cFinishBytes].Add(uint64(d.cap - w))
		if err := d.save(false); err != nil {
			return d.errf("zone finish of zone %d: %w", zi, err)
		}
		return nil
	case backend.ZoneOpOpen:
		switch c {
		case backend.ZoneExplicitOpen:
			return nil
		case backend.ZoneFull:
			return bad()
		}
		if err := d.acquire(z, w, c, backend.ZoneExplicitOpen); err != nil {
			return d.errf("zone open of zone %d: %w", zi, err)
		}
		return nil
	case backend.ZoneOpClose:
		switch c {
		case backend.ZoneClosed:
			return nil
		case backend.ZoneImplicitOpen, backend.ZoneExplicitOpen:
		default:
			return bad()
		}
		next := backend.ZoneClosed
		if w == 0 {
			next = backend.ZoneEmpty
		}
		d.limMu.Lock()
		d.releaseLocked(z, c, next == backend.ZoneClosed)
		z.st.Store(pack(w, next))
		d.limMu.Unlock()
		return nil
	}
	return d.errf("zone action %s: %w", op, syscall.EINVAL)
}

// save makes every completed write durable and, when a write pointer
// moved since the last save, saves the state: data flush, state write,
// flush. The generation and the write pointers are read before the first
// flush, so the saved state covers only writes that flush made durable.
// A failed save breaks the device (every later write, action and flush
// fails), as a filesystem shuts down on a failed log write: what is on the
// media is no longer known.
func (d *Device) save(force bool) error {
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	if err := d.failed(); err != nil {
		return err
	}
	err := d.saveLocked(force)
	if err != nil {
		d.broken.Store(&err)
	}
	return err
}

func (d *Device) saveLocked(force bool) error {
	gen := d.gen.Load()
	if gen == d.savedGen && !force {
		if err := d.media.Flush(); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		return nil
	}
	s := state{fill: make([]int64, len(d.zones)), full: make([]bool, len(d.zones)), zones: len(d.zones)}
	// Under limMu, so the zones it saves as active (written, not full)
	// were all active at one moment: within max_active, as Load checks.
	d.limMu.Lock()
	for i := range d.zones {
		w, c := d.zones[i].load()
		s.fill[i], s.full[i] = w, c == backend.ZoneFull
	}
	d.limMu.Unlock()
	if err := d.media.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	s.ctr = d.ctr.load()
	s.ctr.Saves++
	// A slot whose write or flush failed may be torn on the media: its
	// sequence number is never written again, so the next save goes to
	// the other slot and cannot tear the last good one.
	next := d.seq + 1
	d.seq = next
	if err := d.media.WriteAt(s.encode(d.label, next), d.label.slotOff(next), backend.StreamMeta); err != nil {
		return fmt.Errorf("save zone state: %w", err)
	}
	if err := d.media.Flush(); err != nil {
		return fmt.Errorf("save zone state: flush: %w", err)
	}
	d.ctr[cSaves].Add(1)
	d.savedGen = gen
	return nil
}

// failed returns the error that broke the device, or nil.
func (d *Device) failed() error {
	if p := d.broken.Load(); p != nil {
		return d.errf("failed earlier, the device is read-only until reopened: %w", *p)
	}
	return nil
}

// Flush implements backend.Device: completed writes and their write
// pointers become durable.
func (d *Device) Flush() error {
	if d.ro.Load() {
		return nil
	}
	if err := d.save(false); err != nil {
		return d.errf("%w", err)
	}
	return nil
}

// Discard implements backend.Device. Conventional space is discarded on
// the media; in sequential zones a discard does nothing (the space comes
// back only by reset), which the Device contract allows: callers never
// read discarded blocks.
func (d *Device) Discard(off, length int64) error {
	if d.ro.Load() {
		return d.errf("opened read-only: %w", syscall.EROFS)
	}
	if err := backend.CheckRange("discard", off, length, d.Size()); err != nil {
		return d.errf("%w", err)
	}
	convEnd := int64(d.geo.Conv) * d.geo.ZoneSize
	if end := min(off+length, convEnd); off < end {
		if err := d.media.Discard(off, end-off); err != nil {
			return d.errf("%w", err)
		}
	}
	return nil
}

// Size implements backend.Device: the zones, not the state or the label.
func (d *Device) Size() int64 { return d.label.DataBytes() }

// SectorSize implements backend.Device.
func (d *Device) SectorSize() int { return d.geo.Sector }

// MaxStreams implements backend.Device: a zoned drive has no hardware
// streams; the host separates data by choosing zones.
func (d *Device) MaxStreams() uint32 { return 0 }

// Kind implements backend.Device.
func (d *Device) Kind() string { return "zoned" }

// MakeWritable implements backend.Reopener: the media turns read-write
// (an image file keeps its flock), then the device takes writes. Nothing
// was saved while read-only, so the next Flush saves what changes from
// then on.
func (d *Device) MakeWritable() error {
	if !d.ro.Load() {
		return nil
	}
	if err := backend.MakeWritable(d.media); err != nil {
		return d.errf("%w", err)
	}
	d.ro.Store(false)
	return nil
}

// Close saves the state (when writable), counters included, and closes
// the media; a failed save is returned, but the media is closed all the
// same.
func (d *Device) Close() error {
	var err error
	if !d.ro.Load() {
		if err = d.save(true); err != nil {
			err = d.errf("%w", err)
		}
	}
	if cerr := d.media.Close(); err == nil && cerr != nil {
		err = d.errf("close: %w", cerr)
	}
	return err
}

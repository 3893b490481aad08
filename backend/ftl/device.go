package ftl

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/nvme"
)

// Image layout: the host's logical bytes first, at their own offsets, so
// the data is an ordinary image; then two state slots; then a 4 KiB label
// in the last block. The filesystem sees only the logical part (Size).
//
//	[0, logical)                     data
//	[logical, logical+slot)          state slot 0
//	[logical+slot, logical+2*slot)   state slot 1
//	[size-4096, size)                label
//
// The label is written once by Format. Its geometry is the --ftl spec with
// every key spelled out; a label without the GC timing keys (bg=...) was
// written before they existed and keeps the timing of then. Saves alternate between the slots,
// each checksummed with a sequence number, so a torn save leaves the other
// slot intact: after a crash the model loses at most the counts since its
// last save. With both slots bad the model restarts empty, with a warning;
// the filesystem never depends on it.
const (
	labelSize  = 4096
	slotHeader = 4096
	labelMagic = "SFSFTL\x00\x01"
	slotMagic  = "SFSFTLST"
	// saveEvery bounds how often Flush also saves the state.
	saveEvery = 30 * time.Second
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Label is what the last block of a modelled image says.
type Label struct {
	Geometry Geometry `json:"geometry"`
	Logical  int64    `json:"logical_bytes"`
	Physical int64    `json:"physical_bytes"`
	Units    int      `json:"reclaim_units"`
	SlotSize int64    `json:"-"`
	Nonce    uint64   `json:"-"` // ties slots to this format, not an older one
}

func (l Label) encode() []byte {
	b := make([]byte, labelSize)
	copy(b, labelMagic)
	le := binary.LittleEndian
	le.PutUint64(b[8:], uint64(l.Logical))
	le.PutUint64(b[16:], uint64(l.SlotSize))
	le.PutUint64(b[24:], l.Nonce)
	spec := l.Geometry.String()
	le.PutUint16(b[32:], uint16(len(spec)))
	copy(b[34:], spec)
	le.PutUint32(b[labelSize-4:], crc32.Checksum(b[:labelSize-4], castagnoli))
	return b
}

// errNoLabel means the file is not a modelled image.
var errNoLabel = errors.New("no ftl label")

func decodeLabel(b []byte, fileSize int64) (Label, error) {
	if len(b) != labelSize || string(b[:8]) != labelMagic {
		return Label{}, errNoLabel
	}
	le := binary.LittleEndian
	if crc32.Checksum(b[:labelSize-4], castagnoli) != le.Uint32(b[labelSize-4:]) {
		return Label{}, fmt.Errorf("ftl label: checksum mismatch: %w", ErrState)
	}
	l := Label{Logical: int64(le.Uint64(b[8:])), SlotSize: int64(le.Uint64(b[16:])), Nonce: le.Uint64(b[24:])}
	n := int(le.Uint16(b[32:]))
	if 34+n > labelSize-4 {
		return Label{}, fmt.Errorf("ftl label: geometry of %d bytes: %w", n, ErrState)
	}
	spec := string(b[34 : 34+n])
	base := DefaultGeometry()
	if !strings.Contains(spec, "bg=") {
		// Formatted before GC timing had keys: keep the timing it had.
		base = legacyGeometry()
	}
	g, err := parseGeometry(spec, base)
	if err != nil {
		return Label{}, fmt.Errorf("ftl label: %w", err)
	}
	l.Geometry = g
	if l.Logical <= 0 || l.SlotSize <= slotHeader || l.Logical > fileSize || l.SlotSize > fileSize ||
		l.Logical+2*l.SlotSize+labelSize > fileSize {
		return Label{}, fmt.Errorf("ftl label: logical %d and slots of %d do not fit %d bytes: %w", l.Logical, l.SlotSize, fileSize, ErrState)
	}
	lay, err := newLayout(g, l.Logical)
	if err != nil {
		return Label{}, fmt.Errorf("ftl label: %w", err)
	}
	if slotHeader+stateBound(lay, g.Handles) > l.SlotSize {
		return Label{}, fmt.Errorf("ftl label: slot of %d bytes too small: %w", l.SlotSize, ErrState)
	}
	l.Physical = int64(lay.nru) * int64(lay.ppru) * PageSize
	l.Units = int(lay.nru)
	return l, nil
}

// ReadLabel reads the label of the image at path; ok is false for an image
// without one (a plain image, a block device).
func ReadLabel(path string) (l Label, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return Label{}, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < labelSize {
		return Label{}, false, err
	}
	return readLabel(f, st.Size())
}

func readLabel(f io.ReaderAt, size int64) (Label, bool, error) {
	if size < labelSize {
		return Label{}, false, nil // too small to carry a model
	}
	b := make([]byte, labelSize)
	if _, err := f.ReadAt(b, size-labelSize); err != nil {
		return Label{}, false, fmt.Errorf("read ftl label: %w", err)
	}
	l, err := decodeLabel(b, size)
	if errors.Is(err, errNoLabel) {
		return Label{}, false, nil
	}
	if err != nil {
		return Label{}, true, err
	}
	return l, true, nil
}

// Format makes the image file at path a modelled drive with geometry g: it
// carves the state slots and the label from the end of the file, saves an
// empty model and writes the label last. It returns the label; the
// filesystem then goes into the first Label.Logical bytes.
func Format(path string, g Geometry) (Label, error) {
	if err := g.Validate(); err != nil {
		return Label{}, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return Label{}, fmt.Errorf("ftl format: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Label{}, fmt.Errorf("ftl format: %w", err)
	}
	if !st.Mode().IsRegular() {
		return Label{}, fmt.Errorf("ftl format: %s is not an image file (the model lives beside the data in the image)", path)
	}
	size := st.Size()
	// Size the slots for the whole file as if it were all logical: an
	// upper bound, so the logical size can follow from what is left.
	upper := size / PageSize * PageSize
	if upper <= 0 {
		return Label{}, fmt.Errorf("ftl format: %s is empty: %w", path, ErrGeometry)
	}
	ppru := g.RUSize / PageSize
	lpMax := upper / PageSize
	nruMax := int64(float64(lpMax)/(1-g.OP/100))/ppru + 2
	writers := g.Handles + 1
	if g.Isolation == "persistent" {
		writers = 2 * g.Handles
	}
	bound := stateBound(layout{lpages: uint32(min(lpMax, 1<<31)), nru: uint32(min(nruMax, 1<<31)), writers: writers}, g.Handles)
	slot := (slotHeader + bound + PageSize - 1) / PageSize * PageSize
	logical := (size - labelSize - 2*slot) &^ (1<<20 - 1)
	if logical <= 0 {
		return Label{}, fmt.Errorf("ftl format: %d bytes leave no room for data: %w", size, ErrGeometry)
	}
	m, err := NewModel(g, logical)
	if err != nil {
		return Label{}, fmt.Errorf("ftl format: %w", err)
	}
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return Label{}, fmt.Errorf("ftl format: %w", err)
	}
	l := Label{Geometry: g, Logical: logical, SlotSize: slot, Nonce: binary.LittleEndian.Uint64(nb[:]),
		Physical: m.PhysicalBytes(), Units: m.Units()}
	// Invalidate both slots first, so a state of an earlier format with
	// the same nonce (impossible in practice) or a torn save cannot win.
	zero := make([]byte, slotHeader)
	for i := range 2 {
		if _, err := f.WriteAt(zero, logical+int64(i)*slot); err != nil {
			return Label{}, fmt.Errorf("ftl format: %w", err)
		}
	}
	if _, err := f.WriteAt(slotBytes(l, 1, m.encode()), logical); err != nil {
		return Label{}, fmt.Errorf("ftl format: save state: %w", err)
	}
	if _, err := f.WriteAt(l.encode(), size-labelSize); err != nil {
		return Label{}, fmt.Errorf("ftl format: write label: %w", err)
	}
	if err := f.Sync(); err != nil {
		return Label{}, fmt.Errorf("ftl format: sync: %w", err)
	}
	return l, nil
}

// Unformat removes the label so that the image opens as a plain file again.
func Unformat(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() < labelSize {
		return err
	}
	if _, err := f.WriteAt(make([]byte, labelSize), st.Size()-labelSize); err != nil {
		return fmt.Errorf("remove ftl label: %w", err)
	}
	return f.Sync()
}

// slotBytes frames a state: header (magic, nonce, sequence, length,
// payload checksum, header checksum), then the payload.
func slotBytes(l Label, seq uint64, payload []byte) []byte {
	b := make([]byte, slotHeader+len(payload))
	le := binary.LittleEndian
	copy(b, slotMagic)
	le.PutUint64(b[8:], l.Nonce)
	le.PutUint64(b[16:], seq)
	le.PutUint64(b[24:], uint64(len(payload)))
	le.PutUint32(b[32:], crc32.Checksum(payload, castagnoli))
	le.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	copy(b[slotHeader:], payload)
	return b
}

// readSlot returns the sequence and payload of slot i, or an error when it
// holds no valid state of this format.
func readSlot(r io.ReaderAt, l Label, i int) (uint64, []byte, error) {
	off := l.Logical + int64(i)*l.SlotSize
	h := make([]byte, slotHeader)
	if _, err := r.ReadAt(h, off); err != nil {
		return 0, nil, fmt.Errorf("slot %d: %w", i, err)
	}
	le := binary.LittleEndian
	if string(h[:8]) != slotMagic || crc32.Checksum(h[:36], castagnoli) != le.Uint32(h[36:]) || le.Uint64(h[8:]) != l.Nonce {
		return 0, nil, fmt.Errorf("slot %d: no state: %w", i, ErrState)
	}
	n := le.Uint64(h[24:])
	if n > uint64(l.SlotSize-slotHeader) {
		return 0, nil, fmt.Errorf("slot %d: %d bytes: %w", i, n, ErrState)
	}
	p := make([]byte, n)
	if _, err := r.ReadAt(p, off+slotHeader); err != nil {
		return 0, nil, fmt.Errorf("slot %d: %w", i, err)
	}
	if crc32.Checksum(p, castagnoli) != le.Uint32(h[32:]) {
		return 0, nil, fmt.Errorf("slot %d: checksum mismatch: %w", i, ErrState)
	}
	return le.Uint64(h[16:]), p, nil
}

// loadState picks the newest slot that decodes; with none it returns an
// empty model and the reason.
func loadState(r io.ReaderAt, l Label) (m *Model, seq uint64, lost error) {
	type cand struct {
		seq uint64
		p   []byte
	}
	var cs []cand
	var errs []error
	for i := range 2 {
		s, p, err := readSlot(r, l, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cs = append(cs, cand{s, p})
	}
	if len(cs) == 2 && cs[1].seq > cs[0].seq {
		cs[0], cs[1] = cs[1], cs[0]
	}
	for _, c := range cs {
		m, err := decode(l.Geometry, l.Logical, c.p)
		if err == nil {
			return m, c.seq, nil
		}
		errs = append(errs, err)
	}
	m, err := NewModel(l.Geometry, l.Logical)
	if err != nil {
		return nil, 0, err // cannot happen: decodeLabel checked the layout
	}
	return m, 0, errors.Join(errs...)
}

// Device is an image file with an FDP SSD model beside its data.
//
// The model is a measuring instrument: nothing it does may fail or slow the
// filesystem. Its errors are kept and reported (FDPStats, the log), never
// returned from a data path call, and its state is saved by a goroutine of
// its own, not inside the Flush that a journal commit waits for.
type Device struct {
	f    *backend.File
	path string
	// ro: the image is open read-only; nothing is saved. A remount
	// read-write clears it (MakeWritable, under modeMu).
	ro     atomic.Bool
	modeMu sync.Mutex
	label  Label
	m      *Model
	warn   func(string)

	saveMu   sync.Mutex // serialises saves; guards seq
	seq      uint64
	lastSave atomic.Int64 // unix nanoseconds of the last save started
	kick     chan struct{}
	stop     chan struct{}
	saverWG  sync.WaitGroup
	// writeState writes a framed state at off and makes it durable; tests
	// replace it to make saves fail or block.
	writeState func(b []byte, off int64) error

	// traceMu orders the model's counting with the trace's records (a
	// replay must see the commands in the order the model did); held
	// across the model update only while a trace is recorded.
	traceMu sync.Mutex
	trace   *TraceWriter

	healthMu    sync.Mutex // guards the fields below
	saves       uint64     // successful saves since open
	saveFails   uint64     // failed saves since open
	saveErr     error      // the last save's error, nil once one succeeds
	stoppedWarn bool       // the model's own stop was logged
}

var _ backend.Device = (*Device)(nil)

func init() {
	backend.ModelOpener = func(path string, ro bool, warn func(string)) (backend.Device, bool, error) {
		d, ok, err := Open(path, ro, warn)
		if err != nil || !ok {
			return nil, ok, err
		}
		return d, true, nil
	}
}

// Open opens the image at path when it carries a model label (ok false
// otherwise, with the file left closed). warn, if set, hears that the
// saved state could not be used and the model starts empty, and later
// that the model stopped counting or could not save its state.
func Open(path string, ro bool, warn func(string)) (d *Device, ok bool, err error) {
	f, err := backend.OpenFile(path, ro)
	if err != nil {
		return nil, false, err
	}
	l, ok, err := readLabel(fileReader{f}, f.Size())
	if err != nil || !ok {
		f.Close()
		if err != nil {
			err = fmt.Errorf("device %s: %w", path, err)
		}
		return nil, ok, err
	}
	m, seq, lost := loadState(fileReader{f}, l)
	if m == nil {
		f.Close()
		return nil, true, fmt.Errorf("device %s: %w", path, lost)
	}
	if warn == nil {
		warn = func(string) {}
	}
	if lost != nil {
		warn(fmt.Sprintf("device %s: ftl model state unusable (%v); the model restarts empty, the filesystem is unaffected", path, lost))
	}
	d = &Device{f: f, path: path, label: l, m: m, seq: seq, warn: warn,
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	d.ro.Store(ro)
	d.writeState = d.writeSlot
	d.lastSave.Store(time.Now().UnixNano())
	if !ro {
		d.saverWG.Add(1)
		go d.saver()
	}
	return d, true, nil
}

// MakeWritable implements backend.Reopener: the image is opened again
// read-write (keeping its lock) and the model's state is saved from now on.
func (d *Device) MakeWritable() error {
	d.modeMu.Lock()
	defer d.modeMu.Unlock()
	if !d.ro.Load() {
		return nil
	}
	if err := d.f.MakeWritable(); err != nil {
		return err
	}
	d.ro.Store(false)
	d.saverWG.Add(1)
	go d.saver()
	return nil
}

// saver saves the state whenever Flush finds the last save old enough.
func (d *Device) saver() {
	defer d.saverWG.Done()
	for {
		select {
		case <-d.stop:
			return
		case <-d.kick:
			_ = d.Save() // recorded in the health fields and logged
		}
	}
}

// fileReader adapts backend.File to io.ReaderAt for the slots and label.
type fileReader struct{ f *backend.File }

func (r fileReader) ReadAt(p []byte, off int64) (int, error) {
	if err := r.f.ReadAt(p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Label returns the image's model label.
func (d *Device) Label() Label { return d.label }

// Model returns the live model.
func (d *Device) Model() *Model { return d.m }

// handle maps a write stream to the handle it writes through.
func (d *Device) handle(stream uint32) int { return d.label.Geometry.HandleFor(stream) }

// ReadAt implements backend.Device.
func (d *Device) ReadAt(p []byte, off int64) error {
	if err := backend.CheckRange("read", off, int64(len(p)), d.label.Logical); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	return d.f.ReadAt(p, off)
}

// WriteAt implements backend.Device: the data goes to the image, the model
// counts it under the stream's handle.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	if err := backend.CheckRange("write", off, int64(len(p)), d.label.Logical); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if err := d.f.WriteAt(p, off, stream); err != nil {
		return err
	}
	h := d.handle(stream)
	d.counted(Record{Op: OpWrite, Stream: stream, Handle: uint16(h), Off: off, Len: int64(len(p))}, func() error {
		return d.m.Write(off, int64(len(p)), h)
	})
	return nil
}

// counted runs a model update and, while a trace is recorded, records it
// in the same order. A model error only stops the counting (FDPStats
// reports it); the data is written, so the filesystem must not see a
// failure.
func (d *Device) counted(r Record, update func() error) {
	d.traceMu.Lock()
	tw := d.trace
	if tw == nil {
		d.traceMu.Unlock()
	} else {
		defer d.traceMu.Unlock()
		tw.Add(r)
	}
	if err := update(); err != nil {
		d.modelStopped(err)
	}
}

// modelStopped logs, once, that the model stopped counting.
func (d *Device) modelStopped(err error) {
	d.healthMu.Lock()
	first := !d.stoppedWarn
	d.stoppedWarn = true
	d.healthMu.Unlock()
	if first {
		d.warn(fmt.Sprintf("device %s: ftl model stopped counting (%v); its counters are incomplete from here on, the filesystem is unaffected", d.path, err))
	}
}

// Discard implements backend.Device: punch the hole, invalidate the pages.
func (d *Device) Discard(off, length int64) error {
	if err := backend.CheckRange("discard", off, length, d.label.Logical); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if err := d.f.Discard(off, length); err != nil {
		return err
	}
	d.counted(Record{Op: OpDiscard, Off: off, Len: length}, func() error {
		d.m.Discard(off, length)
		return nil
	})
	return nil
}

// Flush implements backend.Device. When the last save is older than
// saveEvery it asks the saver for another, without waiting for it: a
// journal commit waits for this Flush, and a save of a large drive's map
// writes megabytes.
func (d *Device) Flush() error {
	if err := d.f.Flush(); err != nil {
		return err
	}
	d.traceMu.Lock()
	if d.trace != nil {
		d.trace.Add(Record{Op: OpFlush})
		d.trace.Flush()
	}
	d.traceMu.Unlock()
	if !d.ro.Load() && time.Since(time.Unix(0, d.lastSave.Load())) >= saveEvery {
		select {
		case d.kick <- struct{}{}:
		default: // a save is already asked for
		}
	}
	return nil
}

// saveChunk is how much of a state goes out before the next piece: a
// journal commit's fdatasync running meanwhile finds at most this much of
// it dirty.
const saveChunk = 1 << 20

// writeSlot writes a framed state in pieces, each written back at once,
// then makes it durable.
func (d *Device) writeSlot(b []byte, off int64) error {
	for done := 0; done < len(b); done += saveChunk {
		piece := b[done:min(done+saveChunk, len(b))]
		if err := d.f.WriteAt(piece, off+int64(done), 0); err != nil {
			return err
		}
		if err := d.f.WriteBack(off+int64(done), int64(len(piece))); err != nil {
			return err
		}
	}
	return d.f.Flush()
}

// Save writes the model state to the older slot and makes it durable. Its
// outcome is also kept for FDPStats and logged when it fails.
func (d *Device) Save() error {
	if d.ro.Load() {
		return nil
	}
	d.saveMu.Lock()
	defer d.saveMu.Unlock()
	d.lastSave.Store(time.Now().UnixNano())
	next := d.seq + 1
	var snap snapshot
	d.counted(Record{Op: OpSave}, func() error {
		snap = d.m.snapshot()
		return nil
	})
	b := slotBytes(d.label, next, snap.encode())
	off := d.label.Logical + int64(next%2)*d.label.SlotSize
	err := d.writeState(b, off)
	d.healthMu.Lock()
	defer d.healthMu.Unlock()
	if err != nil {
		err = fmt.Errorf("device %s: save ftl state: %w", d.path, err)
		d.saveFails++
		d.saveErr = err
		d.warn(fmt.Sprintf("%v; the model keeps counting, but a crash now loses the counts since its last good save", err))
		return err
	}
	d.seq = next
	d.saves++
	d.saveErr = nil
	return nil
}

// Precondition applies the label's precondition (mkfs runs it after the
// filesystem is made, whose whole-device discard would undo it) and saves
// the state.
func (d *Device) Precondition() error {
	mode := d.label.Geometry.Precondition
	var err error
	d.counted(Record{Op: OpPrecondition, Off: int64(d.label.Nonce >> 1), Len: preconditionCode[mode]}, func() error {
		err = d.m.Precondition(mode, d.label.Nonce>>1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	return d.Save()
}

// preconditionCode is how a trace spells a precondition mode.
var preconditionCode = map[string]int64{"none": 0, "seq": 1, "random": 2}

// Size implements backend.Device: only the logical space.
func (d *Device) Size() int64 { return d.label.Logical }

// SectorSize implements backend.Device.
func (d *Device) SectorSize() int { return 512 }

// MaxStreams implements backend.Device: one stream per handle.
func (d *Device) MaxStreams() uint32 { return uint32(d.label.Geometry.Handles) }

// Kind implements backend.Device.
func (d *Device) Kind() string { return "ftl" }

// Close stops the saver, saves the model and closes the image. A failed
// save is logged and returned, but the image is closed all the same.
func (d *Device) Close() error {
	if !d.ro.Load() {
		close(d.stop)
		d.saverWG.Wait()
	}
	err := d.Save()
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	d.traceMu.Lock()
	if d.trace != nil {
		if terr := d.trace.Close(); err == nil {
			err = terr
		}
		d.trace = nil
	}
	d.traceMu.Unlock()
	return err
}

// FDPInfo describes the model the way the NVMe backend describes a drive.
func (d *Device) FDPInfo() nvme.FDPInfo {
	g := d.label.Geometry
	pids := make([]uint16, g.Handles)
	for i := range pids {
		pids[i] = uint16(i)
	}
	return nvme.FDPInfo{Enabled: true, ReclaimGroups: 1, ReclaimUnitHandles: uint16(g.Handles),
		ReclaimUnitSize: uint64(g.RUSize), PlacementIDs: pids, LBASize: PageSize}
}

// FDPStats reports the model's counters in the NVMe backend's shape, and
// in ModelError why they may be incomplete. It fails only when the counters
// cannot be read at all, which never happens for the model: a stopped model
// still has the counts up to its stop, and those are worth showing.
func (d *Device) FDPStats() (nvme.FDPStats, error) {
	c := d.m.Counters()
	st := nvme.FDPStats{HostBytesWritten: c.Host, MediaBytesWritten: c.Media, MediaBytesErased: c.Erased,
		WAF: WAF(c.Host, c.Media)}
	for i, h := range c.Handles {
		st.Handles = append(st.Handles, nvme.HandleStats{
			Stream:         uint32(i + 1),
			RUHStatus:      nvme.RUHStatus{PID: uint16(i), RUHID: uint16(i), RUAMW: h.Avail / PageSize},
			AvailableBytes: h.Avail,
			HostBytes:      h.Host,
			MediaBytes:     h.Media,
			WAF:            WAF(h.Host, h.Media),
		})
	}
	var msgs []string
	if err := d.m.Err(); err != nil {
		msgs = append(msgs, err.Error())
	}
	d.healthMu.Lock()
	st.ModelSaves, st.ModelSaveFailures = d.saves, d.saveFails
	if d.saveErr != nil {
		msgs = append(msgs, d.saveErr.Error())
	}
	d.healthMu.Unlock()
	d.traceMu.Lock()
	if d.trace != nil {
		if err := d.trace.Err(); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	d.traceMu.Unlock()
	st.ModelError = strings.Join(msgs, "; ")
	return st, nil
}

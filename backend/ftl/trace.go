package ftl

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/nvme"
)

// A trace (mount -o ftl_trace=FILE) records what a device was asked to do,
// so that `streamfs waf replay` can play it into a model of any drive.
//
// File format, little endian: a 64-byte header (magic "SFSTRACE", u32
// version 1, u32 0, u64 device size in bytes, u32 the recording device's
// handle count (0: none), u32 0, 16 bytes of the recording backend's kind,
// 16 bytes zero), then 32-byte records: u8 op, u8 0, u16 handle (0-based,
// the handle the write got or would get on an FDP drive with the device's
// streams), u32 stream, u64 offset, u64 length, u64 nanoseconds since the
// trace was opened. A precondition record carries the mode in length
// (1 seq, 2 random) and the seed in offset; a save record (op 5) marks a
// state save of a modelled drive. A trace opened again on the
// same device is appended to, so mkfs and several mounts can make one.
const (
	traceMagic   = "SFSTRACE"
	traceVersion = 1
	traceHeader  = 64
	traceRecord  = 32
)

// Trace record operations.
const (
	OpWrite        uint8 = 1
	OpDiscard      uint8 = 2
	OpFlush        uint8 = 3
	OpPrecondition uint8 = 4
	// OpSave marks where the model saved its state, which puts its free
	// list and GC tie-breaks in a canonical order; a replay does the same.
	OpSave uint8 = 5
)

// ErrTrace means a trace file is damaged or not a trace.
var ErrTrace = errors.New("bad ftl trace")

// TraceHeader describes the device a trace was recorded on.
type TraceHeader struct {
	Size    int64  // device bytes
	Handles int    // the recording device's handles, 0 without
	Kind    string // the recording backend
}

// Record is one traced command.
type Record struct {
	Op     uint8
	Handle uint16
	Stream uint32
	Off    int64
	Len    int64
	Nanos  int64
}

// TraceWriter appends records to a trace file. Its errors stop the
// recording and are reported by Err, never by the device calls it records:
// like the model, it is a measuring instrument.
type TraceWriter struct {
	mu  sync.Mutex // guards every field
	f   *os.File
	bw  *bufio.Writer
	t0  time.Time
	buf [traceRecord]byte
	err error
	// warn hears, once, that the recording stopped.
	warn func(string)
}

// SetWarn makes t report, once, that its recording stopped, and a failed
// Close.
func (t *TraceWriter) SetWarn(warn func(string)) {
	t.mu.Lock()
	t.warn = warn
	t.mu.Unlock()
}

// fail records the error that stops the recording; t.mu is held.
func (t *TraceWriter) fail(err error) {
	if t.err != nil {
		return
	}
	t.err = err
	if t.warn != nil {
		t.warn(fmt.Sprintf("ftl trace %s stopped recording (%v); the filesystem is unaffected, the trace ends here", t.f.Name(), err))
	}
}

// CreateTrace opens the trace at path for appending, writing its header
// when it is new; an existing trace must describe the same device size.
func CreateTrace(path string, h TraceHeader) (*TraceWriter, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ftl trace: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ftl trace: %w", err)
	}
	if st.Size() > 0 {
		old, err := readTraceHeader(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("ftl trace %s: %w", path, err)
		}
		if old.Size != h.Size {
			f.Close()
			return nil, fmt.Errorf("ftl trace %s: recorded on a device of %d bytes, this one has %d: %w", path, old.Size, h.Size, ErrTrace)
		}
		// Drop a torn last record, so that appended ones stay aligned.
		end := traceHeader + (st.Size()-traceHeader)/traceRecord*traceRecord
		if err := f.Truncate(end); err != nil {
			f.Close()
			return nil, fmt.Errorf("ftl trace: %w", err)
		}
		if _, err := f.Seek(end, io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("ftl trace: %w", err)
		}
	} else {
		b := make([]byte, traceHeader)
		copy(b, traceMagic)
		le := binary.LittleEndian
		le.PutUint32(b[8:], traceVersion)
		le.PutUint64(b[16:], uint64(h.Size))
		le.PutUint32(b[24:], uint32(h.Handles))
		copy(b[32:48], h.Kind)
		if _, err := f.Write(b); err != nil {
			f.Close()
			return nil, fmt.Errorf("ftl trace: %w", err)
		}
	}
	return &TraceWriter{f: f, bw: bufio.NewWriterSize(f, 1<<20), t0: time.Now()}, nil
}

// Add appends a record.
func (t *TraceWriter) Add(r Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	b := t.buf[:]
	le := binary.LittleEndian
	b[0], b[1] = r.Op, 0
	le.PutUint16(b[2:], r.Handle)
	le.PutUint32(b[4:], r.Stream)
	le.PutUint64(b[8:], uint64(r.Off))
	le.PutUint64(b[16:], uint64(r.Len))
	le.PutUint64(b[24:], uint64(time.Since(t.t0)))
	if _, err := t.bw.Write(b); err != nil {
		t.fail(err)
	}
}

// Flush hands the buffered records to the kernel (no fsync: a trace is
// not worth a device flush).
func (t *TraceWriter) Flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		if err := t.bw.Flush(); err != nil {
			t.fail(err)
		}
	}
}

// Err is the error that stopped the recording, if any.
func (t *TraceWriter) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return fmt.Errorf("ftl trace stopped recording: %w", t.err)
	}
	return nil
}

// Close writes what is buffered, syncs and closes the file.
func (t *TraceWriter) Close() error {
	t.Flush()
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.err
	if serr := t.f.Sync(); err == nil && serr != nil {
		err = serr
		t.fail(err)
	}
	if cerr := t.f.Close(); err == nil && cerr != nil {
		err = cerr
		t.fail(err)
	}
	if err != nil {
		return fmt.Errorf("ftl trace: %w", err)
	}
	return nil
}

func readTraceHeader(r io.ReaderAt) (TraceHeader, error) {
	b := make([]byte, traceHeader)
	if _, err := r.ReadAt(b, 0); err != nil {
		return TraceHeader{}, fmt.Errorf("header: %v: %w", err, ErrTrace)
	}
	le := binary.LittleEndian
	if string(b[:8]) != traceMagic {
		return TraceHeader{}, fmt.Errorf("not a trace: %w", ErrTrace)
	}
	if v := le.Uint32(b[8:]); v != traceVersion {
		return TraceHeader{}, fmt.Errorf("trace version %d, want %d: %w", v, traceVersion, ErrTrace)
	}
	h := TraceHeader{Size: int64(le.Uint64(b[16:])), Handles: int(le.Uint32(b[24:]))}
	kind := b[32:48]
	for i, c := range kind {
		if c == 0 {
			kind = kind[:i]
			break
		}
	}
	h.Kind = string(kind)
	if h.Size <= 0 || h.Size > 1<<50 {
		return TraceHeader{}, fmt.Errorf("device size %d: %w", h.Size, ErrTrace)
	}
	return h, nil
}

// TraceReader reads a trace's records in order.
type TraceReader struct {
	Header TraceHeader
	// Preconditioned says the trace records where mkfs preconditioned
	// the drive.
	Preconditioned bool
	// WriteBytes is the sum of the trace's write lengths.
	WriteBytes int64
	r          *bufio.Reader
	n          int64
}

// OpenTrace reads the header of the trace in f.
func OpenTrace(f *os.File) (*TraceReader, error) {
	h, err := readTraceHeader(f)
	if err != nil {
		return nil, err
	}
	t := &TraceReader{Header: h}
	// One pass ahead for a precondition record (a replay preconditions
	// its drive there, or at the start when the trace has none) and the
	// bytes written (a replay's default interval).
	buf := make([]byte, 1<<20)
	for off := int64(traceHeader); ; {
		n, err := f.ReadAt(buf, off)
		for i := 0; i+traceRecord <= n; i += traceRecord {
			switch buf[i] {
			case OpPrecondition:
				t.Preconditioned = true
			case OpWrite:
				t.WriteBytes += int64(binary.LittleEndian.Uint64(buf[i+16:]) & (1<<50 - 1))
			}
		}
		off += int64(n)
		if err != nil {
			break
		}
	}
	if _, err := f.Seek(traceHeader, io.SeekStart); err != nil {
		return nil, fmt.Errorf("ftl trace: %w", err)
	}
	t.r = bufio.NewReaderSize(f, 1<<20)
	return t, nil
}

// Next returns the next record; io.EOF at the end. A torn last record (a
// crash while recording) ends the trace too.
func (t *TraceReader) Next() (Record, error) {
	var b [traceRecord]byte
	if _, err := io.ReadFull(t.r, b[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return Record{}, err
	}
	t.n++
	le := binary.LittleEndian
	r := Record{Op: b[0], Handle: le.Uint16(b[2:]), Stream: le.Uint32(b[4:]),
		Off: int64(le.Uint64(b[8:])), Len: int64(le.Uint64(b[16:])), Nanos: int64(le.Uint64(b[24:]))}
	if r.Op < OpWrite || r.Op > OpSave || r.Off < 0 || r.Len < 0 ||
		(r.Op != OpPrecondition && (r.Off > t.Header.Size || r.Len > t.Header.Size)) {
		return Record{}, fmt.Errorf("record %d: op %d at %d length %d: %w", t.n, r.Op, r.Off, r.Len, ErrTrace)
	}
	return r, nil
}

// streamHandle maps a stream to a 0-based handle as NVMe and the model do:
// stream N to the N-th handle, no stream (or one beyond the handles) to
// the first.
func streamHandle(stream uint32, handles int) int {
	if stream == 0 || stream > uint32(handles) {
		return 0
	}
	return int(stream - 1)
}

// Traced wraps dev so that every write, discard and flush it completes is
// recorded in tw. A modelled drive records in the order its model counted,
// so that a replay reproduces its counters exactly. The returned device
// keeps dev's FDP reporting.
func Traced(dev backend.Device, tw *TraceWriter) backend.Device {
	if d, ok := dev.(*Device); ok {
		d.traceMu.Lock()
		d.trace = tw
		d.traceMu.Unlock()
		return d
	}
	t := &tracedDevice{Device: dev, tw: tw, handles: int(dev.MaxStreams())}
	if t.handles == 0 {
		// No hardware streams: the handle an FDP drive with one handle
		// per software stream would use is the stream's.
		t.handles = 1 << 16
	}
	if f, ok := dev.(fdpReporter); ok {
		return &tracedFDP{tracedDevice: t, fdp: f}
	}
	return t
}

type fdpReporter interface {
	FDPInfo() nvme.FDPInfo
	FDPStats() (nvme.FDPStats, error)
}

type tracedDevice struct {
	backend.Device
	tw      *TraceWriter
	handles int
}

func (t *tracedDevice) WriteAt(p []byte, off int64, stream uint32) error {
	if err := t.Device.WriteAt(p, off, stream); err != nil {
		return err
	}
	t.tw.Add(Record{Op: OpWrite, Stream: stream, Handle: uint16(streamHandle(stream, t.handles)), Off: off, Len: int64(len(p))})
	return nil
}

func (t *tracedDevice) Discard(off, n int64) error {
	if err := t.Device.Discard(off, n); err != nil {
		return err
	}
	t.tw.Add(Record{Op: OpDiscard, Off: off, Len: n})
	return nil
}

func (t *tracedDevice) Flush() error {
	if err := t.Device.Flush(); err != nil {
		return err
	}
	t.tw.Add(Record{Op: OpFlush})
	t.tw.Flush()
	return nil
}

func (t *tracedDevice) Close() error {
	err := t.Device.Close()
	if terr := t.tw.Close(); err == nil {
		err = terr
	}
	return err
}

type tracedFDP struct {
	*tracedDevice
	fdp fdpReporter
}

func (t *tracedFDP) FDPInfo() nvme.FDPInfo { return t.fdp.FDPInfo() }

// FDPStats adds a stopped recording to the device's report.
func (t *tracedFDP) FDPStats() (nvme.FDPStats, error) {
	st, err := t.fdp.FDPStats()
	if terr := t.tw.Err(); terr != nil {
		st.ModelError = strings.TrimPrefix(st.ModelError+"; "+terr.Error(), "; ")
	}
	return st, err
}

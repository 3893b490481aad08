package wal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/format"
)

// host is a Host with no trees: checkpoints record fixed roots.
type host struct {
	checkpoints int
	released    []alloc.Extent
	failed      error
}

func (h *host) NeedCheckpoint() bool { return false }
func (h *host) Freeze(closeTx func()) (Frozen, error) {
	closeTx()
	return Frozen{Roots: []uint64{0, 0}}, nil
}
func (h *host) Written(Frozen, uint64)       { h.checkpoints++ }
func (h *host) Release(frees []alloc.Extent) { h.released = append(h.released, frees...) }
func (h *host) Failed(err error)             { h.failed = err }

var testGeo = Geometry{BlockSize: 4096, CkptStart: 16, CkptBlocks: 2, JournalStart: 20, JournalBlocks: 64,
	Roots: 2, DataStart: 84, DataEnd: 1024, UUID: [16]byte{1, 2, 3}}

func newLog(t *testing.T, dev Device) (*Log, *host) {
	t.Helper()
	h := &host{}
	l := New(dev, testGeo, h, false)
	l.Start(0, 1, 1, 0)
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	return l, h
}

// mount reads the newest checkpoint and replays the journal after it,
// returning the records' payloads in order.
func mount(t *testing.T, dev Device) (*Log, [][]byte) {
	t.Helper()
	f, err := ReadCheckpoint(dev, testGeo)
	if err != nil {
		t.Fatal(err)
	}
	l := New(dev, testGeo, &host{}, false)
	l.Start(f.Header.Seq, f.Slot, f.Header.JournalSeq, f.Header.JournalPos)
	var got [][]byte
	if _, _, err := l.Replay(f.Header, func(r *format.Record) error {
		got = append(got, []byte(r.Name))
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	return l, got
}

func rec(name string) []byte {
	var e format.Encoder
	e.Unlink(1, name)
	return e.Buf
}

// A commit is durable once Sync returns; frees come back only then.
func TestCommitReplay(t *testing.T) {
	mem, _ := faulty.NewMem(4<<20, 512)
	l, h := newLog(t, mem)
	l.Append(rec("a"), []alloc.Extent{{Start: 100, Len: 1}}, 1)
	l.Append(rec("b"), nil, 2)
	if len(h.released) != 0 {
		t.Fatal("blocks released before the commit")
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(h.released) != 1 {
		t.Fatalf("released %v after the commit", h.released)
	}
	_, got := mount(t, mem)
	if len(got) != 2 || string(got[0]) != "a" || string(got[1]) != "b" {
		t.Fatalf("replayed %q", got)
	}
}

// Rule 5: a torn commit at the tail is never taken for, nor hides, a
// later one; the first checkpoint after the mount moves the sequence on.
func TestTornTailNotReused(t *testing.T) {
	mem, _ := faulty.NewMem(4<<20, 512)
	l, _ := newLog(t, mem)
	l.MoveHead(testGeo.JournalBlocks - 2) // the commit below wraps without filling half the journal (which would checkpoint)
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	f, _ := ReadCheckpoint(mem, testGeo)
	// A torn commit under the next sequence number at the head: header
	// landed, payload did not.
	hdr := format.JournalHeader{Seq: f.Header.JournalSeq, Blocks: 2, PayloadLen: 10,
		PayloadCRC: format.Checksum(bytes.Repeat([]byte{1}, 10)), UUID: testGeo.UUID}
	buf := make([]byte, 2*testGeo.BlockSize)
	copy(buf, hdr.Encode())
	if err := mem.WriteAt(buf, int64((testGeo.JournalStart+f.Header.JournalPos)*testGeo.BlockSize), 0); err != nil {
		t.Fatal(err)
	}
	l, got := mount(t, mem)
	if len(got) != 0 {
		t.Fatalf("replayed %q from a torn commit", got)
	}
	if err := l.Checkpoint(); err != nil { // what a read-write mount does
		t.Fatal(err)
	}
	// A commit too big for the two blocks left: it wraps to position 0.
	for i := 0; i < 400; i++ {
		l.Append(rec(string(bytes.Repeat([]byte{'x'}, 40))), nil, 1)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, got := mount(t, mem); len(got) != 400 {
		t.Fatalf("replayed %d of 400 acknowledged records", len(got))
	}
}

// Rule 4: after a failed flush nothing more is written.
func TestFailedFlushStops(t *testing.T) {
	mem, _ := faulty.NewMem(4<<20, 512)
	fd := faulty.New(mem, 1)
	l, h := newLog(t, fd)
	fd.FailFlushes(1)
	l.Append(rec("a"), nil, 1)
	if err := l.Sync(); !errors.Is(err, ErrFailed) || h.failed == nil {
		t.Fatalf("sync with a failing flush: %v (host told: %v)", err, h.failed)
	}
	writes := fd.Stats().Writes
	l.Append(rec("b"), nil, 1)
	if err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("sync after the failure: %v", err)
	}
	if err := l.Checkpoint(); !errors.Is(err, ErrFailed) {
		t.Fatalf("checkpoint after the failure: %v", err)
	}
	if fd.Stats().Writes != writes {
		t.Fatal("the log wrote after it failed")
	}
}

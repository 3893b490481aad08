package meta

import (
	"runtime"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/format"
)

// TestWriteAllocs: a 4 KiB write allocates nothing in the steady state of
// W1's two paths, an append inside the file's preallocation window (the
// block is mapped: one RecMap journaled and applied, the extent and the
// free-space record in front of it rewritten in place) and an overwrite of
// written blocks (no metadata but the times).
func TestWriteAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	dev := newPlainImage(t, "", 1<<30, 4)
	s, err := Open(dev, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetStream(d, 1); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, d, "f")
	// The comparison of every journaled record with its decoding
	// (checkRecords) allocates; it is a test's, not the write path's.
	defer func(c func(applied format.Record, journaled []byte) error) { checkRecords = c }(checkRecords)
	checkRecords = nil
	buf := make([]byte, 4096)
	off := int64(0)
	appendBlock := func() {
		if _, err := s.Write(f, buf, off, WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		off += 4096
	}
	for range 64 {
		appendBlock()
	}
	const runs = 200
	n, total := allocs(runs, appendBlock)
	t.Logf("append: %v allocations per write (%d in %d writes, AllocsPerRun's warm-up included)", n, total, runs+1)
	if n != 0 {
		t.Errorf("append: %v allocations per write, want 0", n)
	}
	i := int64(0)
	n, total = allocs(runs, func() {
		if _, err := s.Write(f, buf, i%off, WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		i += 4096
	})
	t.Logf("overwrite: %v allocations per write (%d in %d writes, AllocsPerRun's warm-up included)", n, total, runs+1)
	if n != 0 {
		t.Errorf("overwrite: %v allocations per write, want 0", n)
	}
}

// allocs is testing.AllocsPerRun (the average, rounded down) with the
// exact count of allocations in the runs as well.
func allocs(runs int, f func()) (perRun float64, total uint64) {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	perRun = testing.AllocsPerRun(runs, f)
	runtime.ReadMemStats(&b)
	return perRun, b.Mallocs - a.Mallocs
}

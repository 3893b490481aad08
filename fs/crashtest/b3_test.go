package crashtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/meta"
)

// b3Setup is the tree every B3 workload starts from: two directories in
// different AGs (new directories rotate across AGs), a multi-block file
// and a small one, all durable (a clean unmount).
var b3Setup = []op{
	{kind: opMkdir, path: "A"},
	{kind: opMkdir, path: "B"},
	{kind: opCreate, path: "A/foo"},
	{kind: opWrite, path: "A/foo", n: 3*4096 + 100},
	{kind: opCreate, path: "A/bar"},
	{kind: opWrite, path: "A/bar", n: 5000},
}

// b3Ops are the core operations, after CrashMonkey's B3 (OSDI'18): each
// kind of change, small and multi-block where size matters, within a
// directory and across directories of different AGs.
var b3Ops = []op{
	{kind: opCreate, path: "A/new"},
	{kind: opCreate, path: "B/new"},
	{kind: opMkdir, path: "A/C"},
	{kind: opMkdir, path: "B/C"},
	{kind: opWrite, path: "A/foo", off: 1000, n: 100},                               // overwrite, small
	{kind: opWrite, path: "A/foo", off: 2048, n: 3 * 4096},                          // overwrite, multi-block, unaligned
	{kind: opWrite, path: "A/foo", rel: true, n: 100},                               // append, small
	{kind: opWrite, path: "A/foo", rel: true, n: 3*4096 + 512},                      // append, multi-block
	{kind: opWrite, path: "A/new", rel: true, n: 2*4096 + 100},                      // data in a new file
	{kind: opWrite, path: "A/foo", rel: true, off: 8192, n: 4096},                   // beyond EOF: leaves a hole
	{kind: opFalloc, path: "A/foo", rel: true, n: 16384, mode: meta.FallocKeepSize}, // past EOF, size kept
	{kind: opFalloc, path: "A/foo", rel: true, n: 8192},                             // extends the size
	{kind: opFalloc, path: "A/foo", off: 4096, n: 4096, mode: meta.FallocZeroRange | meta.FallocKeepSize},
	{kind: opFalloc, path: "A/foo", off: 2000, n: 6000, mode: meta.FallocPunchHole | meta.FallocKeepSize},
	{kind: opTrunc, path: "A/foo", off: 5000},             // down, mid-block
	{kind: opTrunc, path: "A/foo", rel: true, off: 10000}, // up
	{kind: opLink, path: "A/foo", path2: "A/foo2"},
	{kind: opLink, path: "A/foo", path2: "B/foo2"},
	{kind: opUnlink, path: "A/foo"},
	{kind: opUnlink, path: "A/bar"},
	{kind: opRename, path: "A/foo", path2: "A/baz"},
	{kind: opRename, path: "A/foo", path2: "B/foo"},
	{kind: opRename, path: "A/bar", path2: "A/foo"}, // replaces a file
	{kind: opRename, path: "A/C", path2: "B/D"},     // a directory, across AGs
	{kind: opRmdir, path: "A/C"},
	{kind: opSetxattr, path: "A/foo", name: "user.a", val: "1"},
	{kind: opSetxattr, path: "A", name: "user.d", val: "2"},
	{kind: opSetstream, path: "A/foo", stream: 1},
}

// persistAfter lists the persistence steps that may follow o (st is the
// state before o): fsync of what o changed (fdatasync too when
// withDatasync), fsync of the directories it changed, sync, and nothing
// (when more operations follow).
func persistAfter(o op, st *state, last, withDatasync bool) []op {
	var out []op
	target := o.path
	if o.kind == opLink || o.kind == opRename {
		target = o.path2
	}
	// What target is after o, without applying it (the enumeration of
	// length-3 workloads visits some 600k of these).
	_, in := st.lookup(o.path)
	exists, dir := in != nil, in != nil && in.dir
	switch o.kind {
	case opCreate, opMkdir:
		exists, dir = true, o.kind == opMkdir
	case opUnlink, opRmdir:
		exists = false
	}
	if exists {
		out = append(out, op{kind: opFsync, path: target})
		if withDatasync && !dir {
			out = append(out, op{kind: opFdatasync, path: target})
		}
	}
	dirs := []string{parent(o.path)}
	if o.kind == opLink || o.kind == opRename {
		if d := parent(o.path2); d != dirs[0] {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		if d != target {
			out = append(out, op{kind: opFsync, path: d})
		}
	}
	out = append(out, op{kind: opSync})
	if !last {
		out = append(out, op{})
	}
	return out
}

// b3Walk enumerates every valid sequence of n core operations, each
// followed by one of its persistence choices (none is left out of the
// steps), calling fn with each one's index. steps is reused: fn copies it
// to keep it. fn returns false to stop.
func b3Walk(base *state, n int, fn func(i int, steps []op) bool) int {
	fake := uint64(1 << 60) // model-only inode numbers for the enumeration
	i := 0
	var steps []op
	var rec func(st *state, depth int) bool
	rec = func(st *state, depth int) bool {
		if depth == n {
			i++
			return fn(i-1, steps)
		}
		for _, o := range b3Ops {
			if !o.valid(st) {
				continue
			}
			next := st
			if depth < n-1 {
				next = st.clone()
				fake++
				o.applyModel(next, fake, 1)
			}
			mark := len(steps)
			for _, p := range persistAfter(o, st, depth == n-1, n == 1) {
				steps = append(steps[:mark], o)
				if p.kind != 0 || p.path != "" {
					steps = append(steps, p)
				}
				if !rec(next, depth+1) {
					return false
				}
			}
			steps = steps[:mark]
		}
		return true
	}
	rec(base, 0)
	return i
}

// b3Select picks the workloads a run checks: every stride-th of each
// length (deterministically). The default strides keep the test within a
// few minutes under -race on a busy two-core machine (-short: less);
// STREAMFS_CRASH_FULL=1 checks every workload of length 1 and 2 and a
// 1/211 sample of length 3. STREAMFS_CRASH_STRIDE1, _STRIDE2 and _STRIDE3
// set the strides (0 skips the length); STREAMFS_CRASH_WORKLOAD=b3:LEN:INDEX
// checks one workload.
func b3Select(t *testing.T) (strides [4]int, only string) {
	strides = [4]int{0, 1, 97, 29447}
	if testing.Short() {
		// What CI runs: every single operation, a spread of pairs.
		strides = [4]int{0, 2, 211, 0}
	}
	if full() {
		strides = [4]int{0, 1, 1, 211}
	}
	for n := 1; n <= 3; n++ {
		name := fmt.Sprintf("STREAMFS_CRASH_STRIDE%d", n)
		if s := os.Getenv(name); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 0 {
				t.Fatalf("%s=%q: want a number >= 0", name, s)
			}
			strides[n] = v
		}
	}
	return strides, os.Getenv("STREAMFS_CRASH_WORKLOAD")
}

// full reports whether the full sets were asked for.
func full() bool { return os.Getenv("STREAMFS_CRASH_FULL") == "1" }

func b3Enum() faulty.EnumOptions {
	return faulty.EnumOptions{MaxTears: 4, AllSubsets: 4, Subsets: 8, Seed: 1}
}

// TestCrashB3 checks every crash state of short workloads (see b3Ops and
// the oracle in check_test.go).
func TestCrashB3(t *testing.T) {
	start := time.Now()
	e := newEnv(t, b3Setup)
	if a, b := e.st.ns["A"], e.st.ns["B"]; alloc.InoAG(a) == alloc.InoAG(b) {
		t.Fatalf("directories A (%d) and B (%d) share an AG: the cross-AG cases would not be", a, b)
	}
	strides, only := b3Select(t)
	c := newChecker(t, b3Enum())
	c.repro = func(w workload) string {
		return fmt.Sprintf("STREAMFS_CRASH_WORKLOAD=%s go test -run TestCrashB3 ./fs/crashtest/", w.id)
	}
	counts := map[int]int{}
	for n := 1; n <= 3; n++ {
		stride := strides[n]
		if stride == 0 && only == "" {
			continue
		}
		total := b3Walk(e.st, n, func(i int, steps []op) bool {
			id := fmt.Sprintf("b3:%d:%d", n, i)
			if (only == "" && i%stride == 0) || only == id {
				counts[n]++
				c.workload(e, workload{id: id, steps: slices.Clone(steps)})
			}
			return true
		})
		t.Logf("length %d: %d workloads, %d checked (stride %d)", n, total, counts[n], stride)
	}
	if only != "" && c.workloads == 0 {
		t.Fatalf("no workload %s (ids are b3:LEN:INDEX)", only)
	}
	c.report("B3", time.Since(start))
}

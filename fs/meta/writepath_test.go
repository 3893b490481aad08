package meta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
)

// TestWritePathModel drives one file through appends, writes into holes
// and over data, truncates, fallocate (with and without KEEP_SIZE) and
// hole punches, and compares every read with a byte model: the append
// fast paths (a write past the last extent skips the extent lookup; a
// write into a hole merges with its neighbours in one step) must agree
// with the general ones whatever the extent map looks like. The image is
// then reopened (journal replay) and checked by fsck.
func TestWritePathModel(t *testing.T) {
	fd, _ := newTestImage(t, 256<<20, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "f")
	const bs = 4096
	rng := rand.New(rand.NewPCG(11, 12))
	var model []byte
	grow := func(n int) {
		if n > len(model) {
			model = append(model, make([]byte, n-len(model))...)
		}
	}
	check := func(step int, what string) {
		t.Helper()
		if got := readAll(t, s, f); !bytes.Equal(got, model) {
			i := 0
			for i < min(len(got), len(model)) && got[i] == model[i] {
				i++
			}
			t.Fatalf("step %d (%s): file of %d bytes differs from the model (%d bytes) at byte %d", step, what, len(got), len(model), i)
		}
	}
	for step := range 600 {
		size := int64(len(model))
		var what string
		switch op := rng.IntN(10); {
		case op < 4: // append, often block-aligned, sometimes past EOF
			off := size
			if rng.IntN(3) == 0 {
				off += rng.Int64N(8 * bs)
			}
			n := 1 + rng.IntN(3*bs)
			if rng.IntN(2) == 0 {
				off, n = off/bs*bs, (n+bs-1)/bs*bs
				off = max(off, size/bs*bs)
			}
			p := datatag.Bytes(f.Ino(), off, n, byte(step))
			mustWrite(t, s, f, p, off)
			grow(int(off) + n)
			copy(model[off:], p)
			what = "append"
		case op < 6: // write anywhere inside or just past the file
			off := rng.Int64N(size + 2*bs)
			n := 1 + rng.IntN(2*bs)
			p := datatag.Bytes(f.Ino(), off, n, byte(step))
			mustWrite(t, s, f, p, off)
			grow(int(off) + n)
			copy(model[off:], p)
			what = "write"
		case op < 7: // truncate down or up
			ns := rng.Int64N(size + 4*bs)
			sz := uint64(ns)
			if err := s.Setattr(f, SetAttr{Size: &sz}); err != nil {
				t.Fatal(err)
			}
			if int(ns) < len(model) {
				model = model[:ns]
			} else {
				grow(int(ns))
			}
			what = "truncate"
		case op < 8: // preallocate, past EOF with KEEP_SIZE or not
			off := rng.Int64N(size + 8*bs)
			n := 1 + rng.Int64N(6*bs)
			mode := uint32(0)
			if rng.IntN(2) == 0 {
				mode = FallocKeepSize
			}
			if err := s.Fallocate(f, off, n, mode); err != nil {
				t.Fatal(err)
			}
			if mode == 0 {
				grow(int(off + n))
			}
			what = "fallocate"
		default: // punch a hole
			if size == 0 {
				continue
			}
			off := rng.Int64N(size)
			n := 1 + rng.Int64N(4*bs)
			if err := s.Fallocate(f, off, n, FallocPunchHole|FallocKeepSize); err != nil {
				t.Fatal(err)
			}
			clear(model[off:min(off+n, size)])
			what = "punch"
		}
		check(step, what)
	}
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustFsck(t, fd, false)
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f, err = s.Lookup(s.Root(), "f"); err != nil || f.Ino() != ino {
		t.Fatalf("lookup after reopen: %v", err)
	}
	check(600, "reopened")
}

// A write drops security.capability even when it is set after earlier
// writes (which found none and remembered that), and after a reopen.
func TestWriteKillsCapsSetLater(t *testing.T) {
	s := newTestStore(t, 64<<20)
	f := mustCreate(t, s, s.Root(), "f")
	data := datatag.Bytes(f.Ino(), 0, 4096, 1)
	for round := range 3 {
		mustWrite(t, s, f, data, int64(round)*4096) // finds no capability
		if err := s.Setxattr(f, xattrCaps, []byte("cap"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Getxattr(f, xattrCaps); err != nil || string(v) != "cap" {
			t.Fatalf("round %d: capability after setting it: %q, %v", round, v, err)
		}
		mustWrite(t, s, f, data[:10], 0)
		if _, err := s.Getxattr(f, xattrCaps); !errors.Is(err, syscall.ENODATA) {
			t.Fatalf("round %d: capability after a write: %v, want ENODATA", round, err)
		}
	}
}

// TestAppendOneExtentAcrossCheckpoints: a checkpoint copies the tree nodes
// it changes to new blocks. Taken by best fit, the first such block was the
// one right after the file being appended, and the file's next write
// started a second extent; nodes now come from the top of the AG.
func TestAppendOneExtentAcrossCheckpoints(t *testing.T) {
	s := newTestStore(t, 256<<20)
	f := mustCreate(t, s, s.Root(), "f")
	const bs = 4096
	for i := range 64 {
		mustWrite(t, s, f, datatag.Bytes(f.Ino(), int64(i)*bs, bs, byte(i)), int64(i)*bs)
		if i%8 == 7 {
			// Enough new names that the tree needs new nodes, not only
			// the copies a checkpoint swaps between two blocks.
			for j := range 200 {
				mustCreate(t, s, s.Root(), fmt.Sprintf("g%d-%d", i, j))
			}
			if err := s.checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	exts, err := s.Extents(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(exts) != 1 {
		t.Fatalf("64 appends across 8 checkpoints left %d extents, want 1: %+v", len(exts), exts)
	}
}

// TestOutOfOrderChunksKeepTheirHole: the daemon serves a file's async
// writeback chunks in whatever order its goroutines take the inode lock.
// The hole a later chunk leaves in front of itself is kept for the chunk
// still to come, not handed to the next file by best fit: at the file's
// start (chunk 1 first) and behind its last extent.
func TestOutOfOrderChunksKeepTheirHole(t *testing.T) {
	const other = -1 // a write of another file in the same AG
	for name, order := range map[string][]int64{
		"start": {1, other, 0},
		"end":   {0, 1, 2, 3, 5, other, 4},
	} {
		t.Run(name, func(t *testing.T) {
			s := newTestStore(t, 256<<20)
			a := mustCreate(t, s, s.Root(), "a")
			b := mustCreate(t, s, s.Root(), "b")
			const chunk = 1 << 20
			for _, c := range order {
				if c == other {
					mustWrite(t, s, b, datatag.Bytes(b.Ino(), 0, chunk, 9), 0)
					continue
				}
				mustWrite(t, s, a, datatag.Bytes(a.Ino(), c*chunk, chunk, byte(c)), c*chunk)
			}
			exts, err := s.Extents(a)
			if err != nil {
				t.Fatal(err)
			}
			if len(exts) != 1 {
				t.Fatalf("chunks written in order %v left %d extents, want 1: %+v", order, len(exts), exts)
			}
			for c := range int64(len(order) - 1) {
				got := make([]byte, chunk)
				if _, err := s.Read(a, got, c*chunk); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, datatag.Bytes(a.Ino(), c*chunk, chunk, byte(c))) {
					t.Fatalf("chunk %d reads back wrong", c)
				}
			}
		})
	}
}

package meta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
)

// windowFile is one file of runWindows and the bytes it should hold.
type windowFile struct {
	in   *Inode
	data []byte
	gen  byte
}

// checkWindows checks the invariants of preallocation windows and the
// files' contents after step.
func checkWindows(t *testing.T, s *Store, files []*windowFile, step int, op string) {
	t.Helper()
	var sum int64
	type phys struct {
		start, n uint64
		what     string
	}
	var all []phys
	for fi, f := range files {
		if f == nil {
			continue
		}
		exts, err := s.Extents(f.in)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range exts {
			all = append(all, phys{e.PBlk, e.Len, fmt.Sprintf("file%d ext %+v", fi, e)})
		}
		for i, w := range f.in.pre {
			sum += int64(w.n)
			all = append(all, phys{w.pblk, w.n, fmt.Sprintf("file%d window %+v", fi, w)})
			for j, v := range f.in.pre {
				if j != i && w.lblk < v.lblk+v.n && v.lblk < w.lblk+w.n {
					t.Fatalf("step %d (%s): file%d windows overlap: %+v %+v", step, op, fi, w, v)
				}
			}
			for _, e := range exts {
				if w.lblk < e.LBlk+e.Len && e.LBlk < w.lblk+w.n {
					t.Fatalf("step %d (%s): file%d window %+v overlaps mapped %+v (all windows %+v)", step, op, fi, w, e, f.in.pre)
				}
			}
			s.alloc.FreeExtentsIn(w.pblk, w.n, 1, func(e alloc.Extent) bool {
				t.Fatalf("step %d (%s): file%d window %+v has free blocks %+v", step, op, fi, w, e)
				return false
			})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			a, b := all[i], all[j]
			if a.start < b.start+b.n && b.start < a.start+a.n {
				t.Fatalf("step %d (%s): physical overlap %s / %s", step, op, a.what, b.what)
			}
		}
	}
	if got := s.preBlocks.Load(); got != sum {
		t.Fatalf("step %d (%s): preBlocks %d, windows hold %d", step, op, got, sum)
	}
	if err := s.alloc.Check(); err != nil {
		t.Fatalf("step %d (%s): %v", step, op, err)
	}
	for fi, f := range files {
		if f == nil {
			continue
		}
		if f.in.attr.Size != uint64(len(f.data)) {
			t.Fatalf("step %d (%s): file%d size %d, model %d", step, op, fi, f.in.attr.Size, len(f.data))
		}
		got := make([]byte, len(f.data))
		if len(got) > 0 {
			if _, err := s.Read(f.in, got, 0); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, f.data) {
			for i := range got {
				if got[i] != f.data[i] {
					t.Fatalf("step %d (%s): file%d differs at byte %d (block %d): got %#x want %#x; windows %+v", step, op, fi, i, i/4096, got[i], f.data[i], f.in.pre)
				}
			}
		}
	}
}

// TestPreallocWindowsRandom and TestPreallocWindowsENOSPC: random
// out-of-order and unaligned writes, truncates, every fallocate mode,
// closes and removes over 4 files. After every step: no window overlaps
// another or a mapped extent (in the file or on the device), every window
// block is allocated, preBlocks is the windows' sum, the allocator is
// consistent and every file reads back as the model says; at the end free
// space survives a remount and fsck is clean. The second runs into ENOSPC.
// Under -short one seed, and steps enough for a checkpoint.
func TestPreallocWindowsRandom(t *testing.T) {
	runWindows(t, 256<<20, 64<<10, sized[uint64](3, 1), sized(600, 300), false)
}

// Near ENOSPC every failed allocation commits the journal: slow, so fewer
// steps.
func TestPreallocWindowsENOSPC(t *testing.T) {
	runWindows(t, 48<<20, 512<<10, 1, sized(300, 100), true)
}

func runWindows(t *testing.T, img, chunkSz int64, seeds uint64, steps int, wantFull bool) {
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			fd, _ := newTestImage(t, img, int64(seed))
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(seed, 7))
			files := make([]*windowFile, 4)
			n := 0
			newFile := func(i int) {
				n++
				files[i] = &windowFile{in: mustCreate(t, s, s.Root(), fmt.Sprintf("f%d", n))}
			}
			for i := range files {
				newFile(i)
			}
			chunk := chunkSz
			if wantFull {
				// A filler leaves a few chunks' room: the files reach
				// ENOSPC within the steps.
				filler := mustCreate(t, s, s.Root(), "filler")
				room := int64(s.room()-s.metaReserve)*int64(s.bs) - 8*chunk
				mustWrite(t, s, filler, make([]byte, room/int64(s.bs)*int64(s.bs)), 0)
				s.TrimPrealloc(filler)
			}
			enospc := 0
			for step := range steps {
				i := r.IntN(len(files))
				f := files[i]
				var op string
				switch k := r.IntN(20); {
				case k < 12: // write, often chunk-aligned out of order
					var off, ln int64
					if r.IntN(3) > 0 {
						off = int64(r.IntN(24)) * chunk
						ln = chunk * int64(1+r.IntN(2))
					} else {
						off = r.Int64N(24 * chunk)
						ln = 1 + r.Int64N(3*chunk)
					}
					f.gen++
					p := datatag.Bytes(f.in.Ino(), off, int(ln), f.gen)
					op = fmt.Sprintf("write f%d %d+%d", i, off, ln)
					wn, werr := s.Write(f.in, p, off, WriteOpts{})
					if werr != nil && !errors.Is(werr, syscall.ENOSPC) {
						t.Fatalf("%s: %v", op, werr)
					}
					if werr != nil {
						enospc++
					}
					op += fmt.Sprintf(" -> %d %v", wn, werr)
					if wn > 0 {
						ln = int64(wn)
						if int64(len(f.data)) < off+ln {
							f.data = append(f.data, make([]byte, off+ln-int64(len(f.data)))...)
						}
						copy(f.data[off:], p[:wn])
					}
				case k < 14:
					sz := uint64(r.Int64N(20 * chunk))
					if r.IntN(2) == 0 {
						sz = sz / 4096 * 4096
					}
					op = fmt.Sprintf("truncate f%d %d", i, sz)
					if err := s.Setattr(f.in, SetAttr{Size: &sz}); err != nil {
						t.Fatal(err)
					}
					if uint64(len(f.data)) > sz {
						f.data = f.data[:sz]
					} else {
						f.data = append(f.data, make([]byte, sz-uint64(len(f.data)))...)
					}
				case k < 16:
					off := r.Int64N(20 * chunk)
					ln := 1 + r.Int64N(4*chunk)
					modes := []uint32{0, FallocKeepSize, FallocKeepSize | FallocPunchHole, FallocZeroRange}
					m := modes[r.IntN(len(modes))]
					op = fmt.Sprintf("fallocate f%d %d+%d mode %#x", i, off, ln, m)
					if err := s.Fallocate(f.in, off, ln, m); err != nil {
						if errors.Is(err, syscall.ENOSPC) {
							enospc++
							checkWindows(t, s, files, step, op+" ENOSPC")
							// a failed fallocate may leave part done: resync the model
							f.data = f.data[:min(uint64(len(f.data)), f.in.attr.Size)]
							f.data = append(f.data, make([]byte, f.in.attr.Size-uint64(len(f.data)))...)
							got := make([]byte, len(f.data))
							if len(got) > 0 {
								if _, err := s.Read(f.in, got, 0); err != nil {
									t.Fatal(err)
								}
							}
							f.data = got
							continue
						}
						t.Fatalf("%s: %v", op, err)
					}
					end := off + ln
					size := int64(len(f.data))
					switch {
					case m&FallocPunchHole != 0:
						if off < size {
							clear(f.data[off:min(end, size)])
						}
					case m == FallocZeroRange:
						if end > size {
							f.data = append(f.data, make([]byte, end-size)...)
						}
						clear(f.data[off:end])
					case m == 0:
						if end > size {
							f.data = append(f.data, make([]byte, end-size)...)
						}
					}
				case k < 18:
					op = fmt.Sprintf("close f%d", i)
					s.TrimPrealloc(f.in)
				default:
					op = fmt.Sprintf("remove f%d", i)
					s.TrimPrealloc(f.in)
					var name string
					ents, err := s.Readdir(s.Root())
					if err != nil {
						t.Fatal(err)
					}
					for _, d := range ents {
						if d.Ino == f.in.Ino() {
							name = d.Name
						}
					}
					if err := s.Remove(s.Root(), name, false); err != nil {
						t.Fatal(err)
					}
					newFile(i)
				}
				checkWindows(t, s, files, step, op)
				if step%200 == 199 {
					if err := s.checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, f := range files {
				s.TrimPrealloc(f.in)
			}
			if got := s.preBlocks.Load(); got != 0 {
				t.Fatalf("preBlocks %d after closing every file", got)
			}
			t.Logf("%d steps, %d of them ran out of space", steps, enospc)
			if wantFull && enospc == 0 {
				t.Fatal("the device never filled up: the test did not test ENOSPC")
			}
			if err := s.SyncAll(); err != nil {
				t.Fatal(err)
			}
			if err := s.checkpoint(); err != nil {
				t.Fatal(err)
			}
			free1 := s.alloc.FreeBlocks()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(fd, testOpts())
			if err != nil {
				t.Fatal(err)
			}
			free2 := s2.alloc.FreeBlocks()
			s2.Close()
			if free1 != free2 {
				t.Fatalf("in-memory free %d before close, %d after remount", free1, free2)
			}
			mustFsck(t, fd, false)
		})
	}
}

// TestLeadLeavesMetaReserve: data allocation leaves metaReserve blocks for
// metadata, and so does the lead window of a file's first write that is
// not at offset 0: it is taken only when the room above the reserve covers
// the write's own allocation too.
func TestLeadLeavesMetaReserve(t *testing.T) {
	s := newTestStore(t, 64<<20)
	bs := int64(s.bs)
	filler := mustCreate(t, s, s.Root(), "filler")
	var off int64
	room := func() int64 { return int64(s.alloc.FreeBlocks()) - int64(s.metaReserve) }
	for room() > 1000 {
		step := min(room()-800, 256) * bs
		mustWrite(t, s, filler, make([]byte, step), off)
		off += step
		s.TrimPrealloc(filler)
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	x := room()
	const lead = 8
	if x < 32*lead {
		t.Fatalf("room %d", x)
	}
	b := mustCreate(t, s, s.Root(), "b")
	// Fits above the reserve on its own, with the metadata reservations
	// of its mappings and of its inode's attributes.
	n := x - 2 - int64(2*(opsMap+opsInode)*s.opCost())
	mustWrite(t, s, b, make([]byte, n*bs), lead*bs)
	held := int64(s.PreallocBlocks(b))
	t.Logf("room before %d blocks; wrote %d, windows hold %d, room now %d", x, n, held, room())
	if n+held > x {
		t.Fatalf("a %d-block write with %d blocks above the reserve took %d more for its lead window: free %d < metaReserve %d",
			n, x, held, s.alloc.FreeBlocks(), s.metaReserve)
	}
}

// TestLeadWindowKept: the lead (the window for chunk 0, which writeback
// is most likely still to send) is a new file's oldest window; more
// out-of-order chunks than fit must give back the farthest window, not it.
func TestLeadWindowKept(t *testing.T) {
	s := newTestStore(t, 256<<20)
	a := mustCreate(t, s, s.Root(), "a")
	const chunk = 1 << 20
	for _, c := range []int64{1, 3, 5, 7} {
		mustWrite(t, s, a, datatag.Bytes(a.Ino(), c*chunk, chunk, byte(c)), c*chunk)
		t.Logf("after chunk %d: windows %+v", c, a.pre)
	}
	for _, w := range a.pre {
		if w.lblk == 0 {
			return
		}
	}
	t.Fatalf("chunk 0's lead window was evicted: %+v", a.pre)
}

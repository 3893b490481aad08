package faulty

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
)

// newMemDev wraps a zeroed in-memory device of devSize bytes.
func newMemDev(t *testing.T, seed int64) (*Device, *Mem) {
	t.Helper()
	m, err := NewMem(devSize, 512)
	if err != nil {
		t.Fatal(err)
	}
	return New(m, seed), m
}

func mustFlush(t *testing.T, d *Device) {
	t.Helper()
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
}

func mustCut(t *testing.T, d *Device, opt CutOptions) {
	t.Helper()
	if err := d.PowerCut(opt); err != nil {
		t.Fatal(err)
	}
	d.Revive()
}

func isInjectedEIO(err error) bool {
	return errors.Is(err, syscall.EIO) && errors.Is(err, ErrInjected)
}

// pieceKind classifies the bytes of one sector piece of a write.
type pieceKind int

const (
	pieceOld pieceKind = iota
	pieceNew
	pieceGarbage
)

// pieceBounds splits [off, off+n) at absolute multiples of unit.
func pieceBounds(off, n, unit int64) []int64 {
	b := []int64{off}
	for x := (off/unit + 1) * unit; x < off+n; x += unit {
		b = append(b, x)
	}
	return append(b, off+n)
}

// classify says, piece by piece, whether got holds old, new or neither
// (garbage) over the write [off, off+len(new)); got, old and new are indexed
// by device offset from 0 (old, got) and from off (new).
func classify(got, old, new []byte, off, unit int64) []pieceKind {
	b := pieceBounds(off, int64(len(new)), unit)
	var kinds []pieceKind
	for i := 0; i+1 < len(b); i++ {
		s, e := b[i], b[i+1]
		switch {
		case bytes.Equal(got[s:e], new[s-off:e-off]):
			kinds = append(kinds, pieceNew)
		case bytes.Equal(got[s:e], old[s:e]):
			kinds = append(kinds, pieceOld)
		default:
			kinds = append(kinds, pieceGarbage)
		}
	}
	return kinds
}

func count(kinds []pieceKind, k pieceKind) int {
	n := 0
	for _, x := range kinds {
		if x == k {
			n++
		}
	}
	return n
}

// isPrefix reports whether kinds is some new pieces followed only by old
// ones (ignoring garbage, which counts as not landed).
func isPrefix(kinds []pieceKind) bool {
	seenNotNew := false
	for _, k := range kinds {
		if k == pieceNew && seenNotNew {
			return false
		}
		if k != pieceNew {
			seenNotNew = true
		}
	}
	return true
}

func TestMem(t *testing.T) {
	if _, err := NewMem(1<<20, 1000); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("sector size 1000: %v", err)
	}
	if _, err := NewMem(-1, 512); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("negative size: %v", err)
	}
	m, err := NewMem(1<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if m.Size() != 1<<20 || m.SectorSize() != 4096 || m.MaxStreams() != 0 || m.Kind() != "mem" {
		t.Fatalf("geometry %d %d %d %q", m.Size(), m.SectorSize(), m.MaxStreams(), m.Kind())
	}
	// Zeros take no memory; a write spanning a chunk boundary lands whole.
	if err := m.WriteAt(make([]byte, 300<<10), 0, 0); err != nil {
		t.Fatal(err)
	}
	if m.MemBytes() != 0 {
		t.Fatalf("zero writes took %d bytes", m.MemBytes())
	}
	data := fill(0x5a, 3000)
	if err := m.WriteAt(data, memChunk-1000, 7); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5000)
	if err := m.ReadAt(got, memChunk-2000); err != nil {
		t.Fatal(err)
	}
	want := append(append(make([]byte, 1000), data...), make([]byte, 1000)...)
	if !bytes.Equal(got, want) {
		t.Fatal("read does not return what was written across a chunk boundary")
	}
	if m.MemBytes() != 2*memChunk {
		t.Fatalf("3000 bytes over two chunks took %d bytes", m.MemBytes())
	}
	c := m.Clone()
	if err := m.Discard(memChunk-500, memChunk+500); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadAt(got, memChunk-2000); err != nil {
		t.Fatal(err)
	}
	want2 := append(append(make([]byte, 1000), data[:500]...), make([]byte, 3500)...)
	if !bytes.Equal(got, want2) {
		t.Fatal("discard did not zero exactly its range")
	}
	if m.MemBytes() != memChunk {
		t.Fatalf("a discard of a whole chunk kept it: %d bytes", m.MemBytes())
	}
	// The clone is independent of later changes.
	if err := c.ReadAt(got, memChunk-2000); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("clone changed: %v", err)
	}
	for _, op := range []func() error{
		func() error { return m.ReadAt(make([]byte, 2), 1<<20-1) },
		func() error { return m.WriteAt(make([]byte, 1), -1, 0) },
		func() error { return m.Discard(1<<20, 1) },
	} {
		if err := op(); err == nil {
			t.Fatal("out-of-range I/O succeeded")
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadAt(got, 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("read after close: %v", err)
	}
	// A closed image can still be cloned and mounted again.
	if err := m.Clone().ReadAt(got[:500], memChunk-1000); err != nil || !bytes.Equal(got[:500], data[:500]) {
		t.Fatalf("clone of a closed device: %v", err)
	}
	cp, err := CopyToMem(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.ReadAt(got, memChunk-2000); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy differs: %v", err)
	}
}

func TestFlushOutcomes(t *testing.T) {
	old, upd := fill(0x11, 4096), fill(0x22, 4096)
	setup := func(t *testing.T) *Device {
		d, _ := newMemDev(t, 1)
		mustWrite(t, d, old, 0)
		mustFlush(t, d)
		mustWrite(t, d, upd, 0)
		mustWrite(t, d, upd, 8192)
		return d
	}

	t.Run("landed", func(t *testing.T) {
		d := setup(t)
		d.FailNthFlush(1, FlushFailedLanded)
		if err := d.Flush(); !isInjectedEIO(err) {
			t.Fatalf("flush: %v", err)
		}
		if s := d.Stats(); s.Pending != 0 || s.Flushes != 1 || s.FailedFlushes != 1 || s.FlushCalls != 2 {
			t.Fatalf("stats %+v", s)
		}
		mustCut(t, d, CutOptions{})
		if !bytes.Equal(read(t, d, 0, 4096), upd) || !bytes.Equal(read(t, d, 8192, 4096), upd) {
			t.Fatal("writes of a flush that failed after landing were lost by a cut")
		}
	})

	t.Run("lost", func(t *testing.T) {
		d := setup(t)
		d.FailNthFlush(1, FlushFailedLost)
		if err := d.Flush(); !isInjectedEIO(err) {
			t.Fatalf("flush: %v", err)
		}
		// Lost at once, not only at a later cut.
		if !bytes.Equal(read(t, d, 0, 4096), old) || !bytes.Equal(read(t, d, 8192, 4096), make([]byte, 4096)) {
			t.Fatal("writes of a lost flush still read back")
		}
		if s := d.Stats(); s.Pending != 0 || s.FailedFlushes != 1 {
			t.Fatalf("stats %+v", s)
		}
		// Later writes and flushes work; a cut keeps what they made durable.
		mustWrite(t, d, upd, 4096)
		mustFlush(t, d)
		mustCut(t, d, CutOptions{Reorder: true, TearAny: true})
		if !bytes.Equal(read(t, d, 0, 8192), append(old, upd...)) {
			t.Fatal("state after a lost flush and a good one")
		}
	})

	t.Run("pending", func(t *testing.T) {
		d := setup(t)
		var calls []FlushCall
		d.InjectFlushFaults(func(c FlushCall) FlushOutcome {
			calls = append(calls, c)
			if c.Index == 2 {
				return FlushFailed
			}
			return FlushOK
		})
		if err := d.Flush(); !isInjectedEIO(err) {
			t.Fatalf("flush: %v", err)
		}
		if s := d.Stats(); s.Pending != 2 {
			t.Fatalf("a failed flush changed what is pending: %+v", s)
		}
		// Still in the cache: the next good flush makes them durable.
		mustFlush(t, d)
		mustCut(t, d, CutOptions{})
		if !bytes.Equal(read(t, d, 0, 4096), upd) {
			t.Fatal("writes retried by a later flush were lost")
		}
		want := []FlushCall{{Index: 2, Pending: 2}, {Index: 3, Pending: 2}}
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Fatalf("predicate saw %v, want %v", calls, want)
		}
	})

	t.Run("nth", func(t *testing.T) {
		d, _ := newMemDev(t, 1)
		mustFlush(t, d)
		d.FailNthFlush(3, FlushFailed)
		var failed []int
		for i := 1; i <= 5; i++ {
			if err := d.Flush(); err != nil {
				failed = append(failed, i)
			}
		}
		if fmt.Sprint(failed) != "[3]" {
			t.Fatalf("flushes that failed: %v", failed)
		}
	})

	t.Run("bad outcome", func(t *testing.T) {
		d, _ := newMemDev(t, 1)
		d.InjectFlushFaults(func(FlushCall) FlushOutcome { return 42 })
		if err := d.Flush(); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("unknown outcome: %v", err)
		}
		d.InjectWriteFaults(func(WriteCall) WriteOutcome { return -1 })
		if err := d.WriteAt([]byte{1}, 0, 0); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("unknown outcome: %v", err)
		}
	})
}

func TestWriteOutcomes(t *testing.T) {
	const off = 512 + 100 // unaligned: pieces are 412, 512 x7, 100 bytes
	base := fill(0x11, 8192)
	upd := fill(0xEE, 4096)

	t.Run("landed", func(t *testing.T) {
		d, _ := newMemDev(t, 1)
		mustWrite(t, d, base, 0)
		mustFlush(t, d)
		d.FailNthWrite(1, WriteFailedLanded)
		if err := d.WriteAt(upd, off, 0); !isInjectedEIO(err) {
			t.Fatalf("write: %v", err)
		}
		if !bytes.Equal(read(t, d, off, 4096), upd) {
			t.Fatal("write that failed after landing did not land")
		}
		if s := d.Stats(); s.Writes != 1 || s.FailedWrites != 1 || s.Pending != 1 || s.WriteCalls != 2 {
			t.Fatalf("stats %+v", s)
		}
		// Unflushed like any write: a cut loses it, a flush keeps it.
		img, err := d.CutImage(CutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 8192)
		if err := img.ReadAt(got, 0); err != nil || !bytes.Equal(got, base) {
			t.Fatalf("cut image kept an unflushed failed write: %v", err)
		}
		mustFlush(t, d)
		mustCut(t, d, CutOptions{})
		if !bytes.Equal(read(t, d, off, 4096), upd) {
			t.Fatal("flushed write lost")
		}
	})

	for _, o := range []WriteOutcome{WriteFailedPartly, WriteFailedGarbled} {
		t.Run(o.String(), func(t *testing.T) {
			someNew, notPrefix := 0, 0
			for seed := range int64(30) {
				d, _ := newMemDev(t, seed)
				mustWrite(t, d, base, 0)
				mustFlush(t, d)
				d.FailNthWrite(1, o)
				if err := d.WriteAt(upd, off, 3); !isInjectedEIO(err) {
					t.Fatalf("seed %d: write: %v", seed, err)
				}
				got := read(t, d, 0, 8192)
				kinds := classify(got, base, upd, off, 512)
				if count(kinds, pieceNew) == len(kinds) {
					t.Fatalf("seed %d: partly landed write landed whole", seed)
				}
				wantGarbage := 0
				if o == WriteFailedGarbled {
					wantGarbage = 1
				}
				if g := count(kinds, pieceGarbage); g != wantGarbage {
					t.Fatalf("seed %d: %d garbage pieces %v", seed, g, kinds)
				}
				if !bytes.Equal(got[:off], base[:off]) || !bytes.Equal(got[off+4096:], base[off+4096:]) {
					t.Fatalf("seed %d: bytes outside the write changed", seed)
				}
				if count(kinds, pieceNew) > 0 {
					someNew++
				}
				if !isPrefix(kinds) {
					notPrefix++
				}
				// A cut undoes whatever of it landed.
				mustCut(t, d, CutOptions{})
				if !bytes.Equal(read(t, d, 0, 8192), base) {
					t.Fatalf("seed %d: cut did not undo the partly landed write", seed)
				}
			}
			if someNew == 0 || notPrefix == 0 {
				t.Fatalf("30 seeds: %d with some sectors landed, %d not a prefix", someNew, notPrefix)
			}
		})
	}

	t.Run("calls", func(t *testing.T) {
		d, _ := newMemDev(t, 1)
		var calls []WriteCall
		d.InjectWriteFaults(func(c WriteCall) WriteOutcome {
			calls = append(calls, c)
			if c.Discard {
				return WriteFailedPartly
			}
			return WriteOK
		})
		mustWrite(t, d, fill(9, 1024), 0)
		if err := d.WriteAt(fill(9, 512), 4096, 5); err != nil {
			t.Fatal(err)
		}
		// A partly failed discard lands whole (its range reads as anything).
		if err := d.Discard(0, 1024); !isInjectedEIO(err) {
			t.Fatalf("discard: %v", err)
		}
		if !bytes.Equal(read(t, d, 0, 1024), make([]byte, 1024)) {
			t.Fatal("discard did not land")
		}
		want := []WriteCall{
			{Index: 1, Off: 0, Len: 1024},
			{Index: 2, Off: 4096, Len: 512, Stream: 5},
			{Index: 3, Off: 0, Len: 1024, Discard: true},
		}
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Fatalf("predicate saw %v, want %v", calls, want)
		}
		// FailWrites is checked first and the predicate does not see it.
		d.FailWrites(func(off, n int64) bool { return true })
		if err := d.WriteAt([]byte{1}, 0, 0); !isInjectedEIO(err) {
			t.Fatalf("write: %v", err)
		}
		if len(calls) != 3 || d.Stats().WriteCalls != 4 {
			t.Fatalf("calls %v, stats %+v", calls, d.Stats())
		}
	})
}

// TestReorderedSubset checks that a reordering cut keeps whole writes only
// (no tear asked for), that the kept set need not be a prefix, and that
// "none" and "all" both come up.
func TestReorderedSubset(t *testing.T) {
	const n = 8
	masks := map[int]bool{}
	for seed := range int64(60) {
		d, _ := newMemDev(t, seed)
		mustWrite(t, d, fill(0x11, n*1024), 0)
		mustFlush(t, d)
		for i := range n {
			mustWrite(t, d, fill(byte(i+1), 1024), int64(i)*1024)
		}
		mustCut(t, d, CutOptions{Reorder: true})
		got := read(t, d, 0, n*1024)
		mask := 0
		for i := range n {
			switch r := got[i*1024 : (i+1)*1024]; {
			case bytes.Equal(r, fill(byte(i+1), 1024)):
				mask |= 1 << i
			case !bytes.Equal(r, fill(0x11, 1024)):
				t.Fatalf("seed %d: write %d neither landed nor lost", seed, i)
			}
		}
		masks[mask] = true
	}
	nonPrefix := 0
	for m := range masks {
		if m&(m+1) != 0 { // a prefix mask is 2^k-1
			nonPrefix++
		}
	}
	if !masks[0] || !masks[1<<n-1] || nonPrefix < 10 {
		t.Fatalf("60 seeds: none %v, all %v, %d non-prefix sets", masks[0], masks[1<<n-1], nonPrefix)
	}
}

// TestReorderedOverlap: where landed writes overlap, either may be on top,
// including the older one, which no prefix of the writes can produce.
func TestReorderedOverlap(t *testing.T) {
	a, b := fill(0xAA, 1024), fill(0xBB, 1024)
	seen := map[string]bool{}
	for seed := range int64(40) {
		d, _ := newMemDev(t, seed)
		mustWrite(t, d, a, 0)
		mustWrite(t, d, b, 512)
		mustCut(t, d, CutOptions{Reorder: true})
		got := read(t, d, 0, 1536)
		s0, s1, s2 := got[0], got[512], got[1024]
		for i, s := range []byte{s0, s1, s2} {
			if !bytes.Equal(got[i*512:(i+1)*512], fill(s, 512)) {
				t.Fatalf("seed %d: sector %d mixed", seed, i)
			}
		}
		aLanded, bLanded := s0 == 0xAA, s2 == 0xBB
		ok := false
		switch {
		case !aLanded && !bLanded:
			ok = s1 == 0
		case aLanded && !bLanded:
			ok = s1 == 0xAA
		case !aLanded && bLanded:
			ok = s1 == 0xBB
		default:
			ok = s1 == 0xAA || s1 == 0xBB
		}
		if !ok || (s0 != 0 && s0 != 0xAA) || (s2 != 0 && s2 != 0xBB) {
			t.Fatalf("seed %d: impossible result %x %x %x", seed, s0, s1, s2)
		}
		seen[fmt.Sprintf("%x%x%x", s0, s1, s2)] = true
	}
	if !seen["aaaabb"] || !seen["aabbbb"] {
		t.Fatalf("both landed with either on top not seen: %v", seen)
	}
}

// TestReorderedTear checks tears under reordering: sector-granular, any
// subset of a write's sectors (not only a prefix), never a whole write; one
// torn write with TearLast, possibly several with TearAny; with Garbage
// exactly one garbled sector per torn write.
func TestReorderedTear(t *testing.T) {
	const n, size = 4, 8 * 512
	for _, opt := range []CutOptions{
		{Reorder: true, TearLast: true},
		{Reorder: true, TearLast: true, Garbage: true},
		{Reorder: true, TearAny: true, Garbage: true},
	} {
		t.Run(fmt.Sprintf("%+v", opt), func(t *testing.T) {
			torn, nonPrefix, multi := 0, 0, 0
			for seed := range int64(40) {
				d, _ := newMemDev(t, seed)
				base := fill(0x11, n*size)
				mustWrite(t, d, base, 0)
				mustFlush(t, d)
				for i := range n {
					mustWrite(t, d, fill(byte(0x21+i), size), int64(i*size))
				}
				mustCut(t, d, opt)
				got := read(t, d, 0, n*size)
				tornHere, garbage := 0, 0
				for i := range n {
					kinds := classify(got, base, fill(byte(0x21+i), size), int64(i*size), 512)
					g, nw := count(kinds, pieceGarbage), count(kinds, pieceNew)
					garbage += g
					if nw == len(kinds) || nw+g == 0 {
						continue // landed whole or not at all
					}
					tornHere++
					if !isPrefix(kinds) {
						nonPrefix++
					}
					if opt.Garbage && g != 1 {
						t.Fatalf("seed %d: write %d torn with %d garbage sectors", seed, i, g)
					}
				}
				if !opt.Garbage && garbage > 0 {
					t.Fatalf("seed %d: garbage without Garbage", seed)
				}
				if !opt.TearAny && tornHere > 1 {
					t.Fatalf("seed %d: %d writes torn with TearLast", seed, tornHere)
				}
				if tornHere > 0 {
					torn++
				}
				if tornHere > 1 {
					multi++
				}
			}
			if torn == 0 || nonPrefix == 0 || (opt.TearAny && multi == 0) {
				t.Fatalf("40 seeds: %d torn, %d non-prefix tears, %d with several", torn, nonPrefix, multi)
			}
		})
	}
}

// TestPrefixTearGarbage: in prefix mode the sector at the tear point holds
// garbage, the landed part is a sector prefix, and the rest is old.
func TestPrefixTearGarbage(t *testing.T) {
	for _, unit := range []int{0, 4096} {
		t.Run(fmt.Sprint(unit), func(t *testing.T) {
			u := int64(unit)
			if u == 0 {
				u = 512
			}
			partial := 0
			for seed := range int64(30) {
				d, _ := newMemDev(t, seed)
				base := fill(0x11, 32768)
				mustWrite(t, d, base, 0)
				mustFlush(t, d)
				const off = 100
				upd := fill(0xEE, 16384)
				mustWrite(t, d, upd, off)
				mustCut(t, d, CutOptions{KeepRandomPrefix: true, TearLast: true, Garbage: true, TearUnit: unit})
				got := read(t, d, 0, 32768)
				if bytes.Equal(got, base) {
					continue // the write was not kept
				}
				kinds := classify(got, base, upd, off, u)
				k := 0
				for k < len(kinds) && kinds[k] == pieceNew {
					k++
				}
				if k == len(kinds) || kinds[k] != pieceGarbage || count(kinds[k+1:], pieceOld) != len(kinds)-k-1 {
					t.Fatalf("seed %d: pieces %v: want landed prefix, one garbage, old rest", seed, kinds)
				}
				// The garbled piece is random through and through, not a
				// finer tear of old and new bytes.
				gs := pieceBounds(off, int64(len(upd)), u)[k]
				for x := gs; x < min(gs+u, off+int64(len(upd))); x += 512 {
					e := min((x/512+1)*512, off+int64(len(upd)))
					if bytes.Equal(got[x:e], base[x:e]) || bytes.Equal(got[x:e], upd[x-off:e-off]) {
						t.Fatalf("seed %d: garbled piece at %d has old or new bytes at %d", seed, gs, x)
					}
				}
				if k > 0 {
					partial++
				}
			}
			if partial == 0 {
				t.Fatal("no seed landed part of the write")
			}
		})
	}
}

// TestCutImageMatchesPowerCut: the image CutImage returns is what PowerCut
// with the same seed and options leaves, and the device keeps running.
func TestCutImageMatchesPowerCut(t *testing.T) {
	work := func(t *testing.T, d *Device) {
		rng := rand.New(rand.NewPCG(7, 7))
		for i := range 60 {
			off := rng.Int64N(devSize - 8192)
			mustWrite(t, d, fill(byte(i+1), 1+rng.IntN(8192)), off)
			if i%7 == 0 {
				if err := d.Discard(off&^511, 4096); err != nil {
					t.Fatal(err)
				}
			}
			if i == 30 {
				mustFlush(t, d)
			}
		}
	}
	for i, opt := range []CutOptions{
		{},
		{KeepRandomPrefix: true, TearLast: true, Garbage: true},
		{Reorder: true},
		{Reorder: true, TearLast: true, TearAny: true, Garbage: true, TearUnit: 4096},
	} {
		cut, cutMem := newMemDev(t, int64(i))
		work(t, cut)
		mustCut(t, cut, opt)

		live, liveMem := newMemDev(t, int64(i))
		work(t, live)
		before := liveMem.Clone()
		img, err := live.CutImage(opt)
		if err != nil {
			t.Fatal(err)
		}
		want, got := make([]byte, devSize), make([]byte, devSize)
		if err := cutMem.ReadAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := img.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v: CutImage differs from PowerCut", opt)
		}
		// The live device is untouched and still takes I/O.
		if err := before.ReadAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := liveMem.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v: CutImage changed the live device", opt)
		}
		mustWrite(t, live, []byte{1}, 0)
		mustFlush(t, live)
	}
}

// TestReproducibleFaults: the same seed and I/O give the same image with
// every new mode and injected fault in play; other seeds give others.
func TestReproducibleFaults(t *testing.T) {
	run := func(seed int64) []byte {
		d, m := newMemDev(t, seed)
		pick := rand.New(rand.NewPCG(uint64(seed), 1))
		d.InjectWriteFaults(func(WriteCall) WriteOutcome {
			if pick.IntN(5) == 0 {
				return WriteOutcome(1 + pick.IntN(4))
			}
			return WriteOK
		})
		d.InjectFlushFaults(func(FlushCall) FlushOutcome {
			if pick.IntN(3) == 0 {
				return FlushOutcome(1 + pick.IntN(3))
			}
			return FlushOK
		})
		for i := range 40 {
			_ = d.WriteAt(fill(byte(i+1), 3000), int64(i)*1777, 0)
			if i%9 == 0 {
				_ = d.Flush()
			}
		}
		if err := d.PowerCut(CutOptions{Reorder: true, TearLast: true, TearAny: true, Garbage: true}); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, devSize)
		if err := m.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		return got
	}
	images := map[string]bool{}
	for _, seed := range []int64{3, 99, -5} {
		a := run(seed)
		if !bytes.Equal(a, run(seed)) {
			t.Fatalf("seed %d: two runs left different images", seed)
		}
		images[string(a)] = true
	}
	if len(images) != 3 {
		t.Fatalf("3 seeds gave %d distinct images", len(images))
	}
}

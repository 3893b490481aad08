package alloc

import (
	"errors"
	"testing"
)

func TestInoRoundTrip(t *testing.T) {
	ino := MakeIno(7, 123456)
	if InoAG(ino) != 7 || InoAGino(ino) != 123456 {
		t.Fatalf("MakeIno(7,123456) = %#x: ag %d agino %d", ino, InoAG(ino), InoAGino(ino))
	}
	ino = MakeIno(^uint32(0), ^uint32(0))
	if InoAG(ino) != ^uint32(0) || InoAGino(ino) != ^uint32(0) {
		t.Fatalf("max ino %#x split wrong", ino)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{PolicyInode, PolicyAGSet, PolicyStreams} {
		got, err := ParsePolicy(p.String())
		if err != nil || got != p {
			t.Fatalf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	if got, err := ParsePolicy(" Streams "); err != nil || got != PolicyStreams {
		t.Fatalf("ParsePolicy(\" Streams \") = %v, %v", got, err)
	}
	if _, err := ParsePolicy("zoned"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ParsePolicy(zoned) err = %v, want ErrInvalid", err)
	}
	if s := Policy(9).String(); s != "Policy(9)" {
		t.Fatalf("Policy(9).String() = %q", s)
	}
}

// targetOf is the AG the policy tries first for (ino, stream).
func targetOf(a *Allocator, ino uint64, stream uint32) uint32 {
	first, size := a.AGSet(ino, stream)
	return targetAG(first, size, InoAGino(ino), a.geo.AGCount)
}

func newTest(t testing.TB, geo Geometry, opts Options) *Allocator {
	t.Helper()
	a, err := New(geo, opts)
	if err != nil {
		t.Fatalf("New(%+v, %+v): %v", geo, opts, err)
	}
	t.Cleanup(a.Close)
	return a
}

// The seed's example (patch 5): 8 AGs, 4 streams, set size 2.
func TestSeedExample(t *testing.T) {
	geo := Geometry{AGCount: 8, AGBlocks: 1000, TotalBlocks: 8000}
	for _, hw := range []uint32{0, 4} { // 8 AGs give 4 software streams too
		a := newTest(t, geo, Options{Policy: PolicyStreams, HWStreams: hw})
		if n := a.MaxStreams(); n != 4 {
			t.Fatalf("hw=%d: MaxStreams = %d, want 4", hw, n)
		}
		cases := []struct {
			agino  uint32
			stream uint32
			ag     uint32
		}{
			{100, 1, 0}, {101, 1, 1}, {200, 2, 2}, {201, 2, 3},
		}
		for _, c := range cases {
			// The inode's own AG must not matter once a stream is set.
			ino := MakeIno(5, c.agino)
			if got := targetOf(a, ino, c.stream); got != c.ag {
				t.Errorf("hw=%d agino %d stream %d: target AG %d, want %d", hw, c.agino, c.stream, got, c.ag)
			}
			e, err := a.Alloc(Request{Ino: ino, Stream: c.stream, Len: 10})
			if err != nil {
				t.Fatal(err)
			}
			if got := uint32(e.Start / geo.AGBlocks); got != c.ag {
				t.Errorf("hw=%d agino %d stream %d: allocated in AG %d, want %d", hw, c.agino, c.stream, got, c.ag)
			}
		}
	}
}

func TestStreamAGSetUneven(t *testing.T) {
	want := [][2]uint32{{0, 2}, {2, 2}, {4, 2}, {6, 4}}
	for s, w := range want {
		f, n := StreamAGSet(uint32(s+1), 4, 10)
		if f != w[0] || n != w[1] {
			t.Errorf("StreamAGSet(%d, 4, 10) = (%d, %d), want (%d, %d)", s+1, f, n, w[0], w[1])
		}
	}
	// Fan-out inside the last stream's set covers AGs 6..9.
	a := newTest(t, Geometry{AGCount: 10, AGBlocks: 10, TotalBlocks: 100}, Options{Policy: PolicyStreams, HWStreams: 4})
	seen := map[uint32]bool{}
	for agino := range uint32(8) {
		seen[targetOf(a, MakeIno(0, agino), 4)] = true
	}
	for ag := uint32(6); ag <= 9; ag++ {
		if !seen[ag] {
			t.Errorf("stream 4 never targets AG %d (seen %v)", ag, seen)
		}
	}
	if len(seen) != 4 {
		t.Errorf("stream 4 targets %v, want exactly AGs 6..9", seen)
	}
}

func TestStreamAGSetRoundRobin(t *testing.T) {
	// 3 AGs, 8 streams: one AG per stream, round robin.
	for s := uint32(1); s <= 8; s++ {
		f, n := StreamAGSet(s, 8, 3)
		if f != (s-1)%3 || n != 1 {
			t.Errorf("StreamAGSet(%d, 8, 3) = (%d, %d), want (%d, 1)", s, f, n, (s-1)%3)
		}
	}
}

func TestStreamIDsWrap(t *testing.T) {
	for s := uint32(5); s <= 40; s++ {
		wf, wn := StreamAGSet((s-1)%4+1, 4, 8)
		f, n := StreamAGSet(s, 4, 8)
		if f != wf || n != wn {
			t.Errorf("StreamAGSet(%d, 4, 8) = (%d, %d), want (%d, %d)", s, f, n, wf, wn)
		}
	}
	if f, n := StreamAGSet(^uint32(0), 4, 8); n == 0 || f+n > 8 {
		t.Errorf("StreamAGSet(max, 4, 8) = (%d, %d)", f, n)
	}
	a := newTest(t, Geometry{AGCount: 8, AGBlocks: 8, TotalBlocks: 64}, Options{Policy: PolicyStreams})
	ino := MakeIno(3, 101)
	if got, want := targetOf(a, ino, 6), targetOf(a, ino, 2); got != want {
		t.Errorf("stream 6 targets AG %d, stream 2 targets AG %d; want equal", got, want)
	}
}

func TestStreamAGSetDegenerate(t *testing.T) {
	for _, c := range [][3]uint32{{0, 4, 8}, {1, 0, 8}, {1, 4, 0}} {
		if f, n := StreamAGSet(c[0], c[1], c[2]); f != 0 || n != 0 {
			t.Errorf("StreamAGSet%v = (%d, %d), want (0, 0)", c, f, n)
		}
	}
	if GenericAGSet(3, 5, 0) != 0 {
		t.Error("GenericAGSet with 0 AGs should be 0")
	}
}

func TestSoftwareStreams(t *testing.T) {
	explicit := map[uint32][2]uint32{
		1: {1, 1}, 7: {1, 7}, 8: {2, 4}, 9: {2, 4}, 31: {2, 15},
		32: {4, 8}, 33: {4, 8}, 63: {4, 15}, 64: {4, 16},
	}
	for nags := uint32(1); nags <= 64; nags++ {
		set, n := SoftwareStreams(nags)
		wantSet := uint32(1)
		if nags >= 32 {
			wantSet = 4
		} else if nags >= 8 {
			wantSet = 2
		}
		wantN := min(nags/wantSet, 16)
		if set != wantSet || n != wantN {
			t.Errorf("SoftwareStreams(%d) = (%d, %d), want (%d, %d)", nags, set, n, wantSet, wantN)
		}
		if w, ok := explicit[nags]; ok && (set != w[0] || n != w[1]) {
			t.Errorf("SoftwareStreams(%d) = (%d, %d), want %v", nags, set, n, w)
		}
		// With software streams every AG belongs to exactly one stream's set.
		owner := make([]int, nags)
		for s := uint32(1); s <= n; s++ {
			f, sz := StreamAGSet(s, n, nags)
			if sz == 0 || f+sz > nags {
				t.Fatalf("nags %d stream %d: set (%d, %d) out of range", nags, s, f, sz)
			}
			for ag := f; ag < f+sz; ag++ {
				owner[ag]++
			}
		}
		for ag, c := range owner {
			if c != 1 {
				t.Errorf("nags %d: AG %d in %d stream sets, want 1", nags, ag, c)
			}
		}
		a := newTest(t, Geometry{AGCount: nags, AGBlocks: 4, TotalBlocks: uint64(nags) * 4}, Options{})
		if a.MaxStreams() != n {
			t.Errorf("nags %d: MaxStreams %d, want %d", nags, a.MaxStreams(), n)
		}
	}
}

func TestGenericAndInodePolicies(t *testing.T) {
	geo := Geometry{AGCount: 8, AGBlocks: 8, TotalBlocks: 64}
	inode := newTest(t, geo, Options{Policy: PolicyInode})
	agset := newTest(t, geo, Options{Policy: PolicyAGSet})
	streams := newTest(t, geo, Options{Policy: PolicyStreams})
	for base := range uint32(8) {
		for agino := range uint32(4) {
			ino := MakeIno(base, agino)
			if got := targetOf(inode, ino, 1); got != base {
				t.Errorf("inode policy: ino ag %d: target %d", base, got)
			}
			want := (base + agino%2) % 8
			if got := GenericAGSet(base, agino, 8); got != want {
				t.Errorf("GenericAGSet(%d, %d, 8) = %d, want %d", base, agino, got, want)
			}
			if got := targetOf(agset, ino, 3); got != want {
				t.Errorf("agset policy ignores streams: target %d, want %d", got, want)
			}
			if got := targetOf(streams, ino, 0); got != want {
				t.Errorf("streams policy, stream 0: target %d, want %d", got, want)
			}
		}
	}
	// The AG in the inode number is taken modulo the AG count.
	if got := targetOf(inode, MakeIno(11, 0), 0); got != 3 {
		t.Errorf("inode in AG 11 of 8: target %d, want 3", got)
	}
	one := newTest(t, Geometry{AGCount: 1, AGBlocks: 8, TotalBlocks: 8}, Options{Policy: PolicyAGSet})
	if f, n := one.AGSet(MakeIno(0, 1), 0); f != 0 || n != 1 {
		t.Errorf("1 AG: AGSet = (%d, %d), want (0, 1)", f, n)
	}
}

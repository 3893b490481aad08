package faulty

import (
	"bytes"
	"testing"
)

// TestRecorderCrashStates checks that the enumerated states of a small log
// are built as described: flushed writes always there, unflushed ones
// landed, dropped or torn at sector granularity.
func TestRecorderCrashStates(t *testing.T) {
	mem, err := NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	base := mem.Clone()
	r := NewRecorder(mem)
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.WriteAt(fill(1, 4096), 0, 0))    // op 0
	must(r.Flush())                         // op 1
	r.Mark(7)                               // op 2
	must(r.WriteAt(fill(2, 1024), 8192, 0)) // op 3: two sectors
	must(r.WriteAt(fill(3, 512), 0, 0))     // op 4: overlaps op 0, flushed
	must(r.WriteAt(fill(4, 512), 8192, 0))  // op 5: overlaps op 3
	ops := r.Ops()
	if len(ops) != 6 || ops[2].Kind != RecMark || ops[2].Mark != 7 {
		t.Fatalf("log %+v", ops)
	}
	states := CrashStates(ops, EnumOptions{TearUnit: 512, MaxTears: 4, AllSubsets: 4, Subsets: 3, Seed: 1})
	rp := NewReplayer(base, ops, 512)
	kinds := map[string]int{}
	prev := 0
	for _, c := range states {
		kinds[c.Variant]++
		if c.Durable < prev {
			t.Fatalf("%v: Durable went back", c)
		}
		prev = c.Durable
		img, err := rp.Image(c)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 512)
		must(img.ReadAt(got, 8192+512))
		if c.Durable >= 2 {
			// op 0 is durable; its first sector is op 0's or op 4's.
			b := make([]byte, 4096)
			must(img.ReadAt(b, 0))
			if !bytes.Equal(b[512:], fill(1, 3584)) || (b[0] != 1 && b[0] != 3) {
				t.Fatalf("%v: flushed write lost", c)
			}
		}
		// The second sector of op 3 is there only if op 3 landed with it.
		want := byte(0)
		for _, l := range c.Land {
			if l.Op == 3 && (l.Sectors == nil || contains(l.Sectors, 1)) {
				want = 2
			}
		}
		if got[0] != want {
			t.Fatalf("%v: sector 17 holds %d, want %d", c, got[0], want)
		}
	}
	for _, k := range []string{"prefix", "torn", "subset", "reorder"} {
		if kinds[k] == 0 {
			t.Errorf("no %s states in %v", k, kinds)
		}
	}
	if base.Digest() == mem.Digest() {
		t.Error("digest did not change with the contents")
	}
	z, _ := NewMem(1<<20, 512)
	must(z.WriteAt(fill(5, 4096), 0, 0))
	must(z.WriteAt(fill(0, 4096), 0, 0))
	if z.Digest() != base.Digest() {
		t.Error("a chunk of zeros changed the digest")
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

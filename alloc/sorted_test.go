package alloc

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func lessInt(a, b int) bool { return a < b }

// TestSortedSetModel checks the chunked set against a plain sorted slice
// through enough inserts to split chunks and enough deletes to drop them.
func TestSortedSetModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := newSortedSet(lessInt)
	var model []int
	check := func(key int) {
		i, found := slices.BinarySearch(model, key)
		c, ok := s.ceil(key)
		if ok != (i < len(model)) || (ok && c != model[i]) {
			t.Fatalf("ceil(%d) = %d, %v; model %v", key, c, ok, i < len(model))
		}
		j := i - 1
		if found {
			j = i
		}
		f, ok := s.floor(key)
		if ok != (j >= 0) || (ok && f != model[j]) {
			t.Fatalf("floor(%d) = %d, %v; want index %d", key, f, ok, j)
		}
	}
	for round := range 3 {
		for range 4000 {
			x := rng.IntN(10000)
			i, found := slices.BinarySearch(model, x)
			if got := s.insert(x); got == found {
				t.Fatalf("insert(%d) = %v with present=%v", x, got, found)
			}
			if !found {
				model = slices.Insert(model, i, x)
			}
			check(rng.IntN(10001) - 1)
		}
		for range 3000 + round*500 {
			x := rng.IntN(10000)
			i, found := slices.BinarySearch(model, x)
			if got := s.delete(x); got != found {
				t.Fatalf("delete(%d) = %v with present=%v", x, got, found)
			}
			if found {
				model = slices.Delete(model, i, i+1)
			}
			check(rng.IntN(10001) - 1)
		}
		if s.len() != len(model) {
			t.Fatalf("len %d, model %d", s.len(), len(model))
		}
		var all []int
		s.all(func(x int) bool { all = append(all, x); return true })
		if !slices.Equal(all, model) {
			t.Fatal("all() differs from the model")
		}
		for ci, c := range s.chunks {
			if len(c) == 0 || len(c) > chunkMax {
				t.Fatalf("chunk %d has %d items", ci, len(c))
			}
		}
		if l, ok := s.last(); ok != (len(model) > 0) || (ok && l != model[len(model)-1]) {
			t.Fatalf("last() = %d, %v", l, ok)
		}
		var from []int
		s.ascend(5000, func(x int) bool { from = append(from, x); return len(from) < 10 })
		i, _ := slices.BinarySearch(model, 5000)
		if want := model[i:min(i+10, len(model))]; !slices.Equal(from, want) {
			t.Fatalf("ascend(5000) = %v, want %v", from, want)
		}
	}
	for _, x := range slices.Clone(model) {
		s.delete(x)
	}
	if s.len() != 0 || len(s.chunks) != 0 {
		t.Fatalf("emptied set: len %d, %d chunks", s.len(), len(s.chunks))
	}
	if _, ok := s.last(); ok {
		t.Fatal("last() on empty set")
	}
}

// A set loaded with setSorted shares one backing array among its chunks:
// inserts and deletes must not write across chunk boundaries.
func TestSortedSetBulkLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var model []int
	for x := 0; x < 20000; x += 3 {
		model = append(model, x)
	}
	s := newSortedSet(lessInt)
	s.setSorted(slices.Clone(model))
	if len(s.chunks) < 2 {
		t.Fatalf("%d chunks for %d items", len(s.chunks), len(model))
	}
	for op := range 6000 {
		x := rng.IntN(20000)
		i, found := slices.BinarySearch(model, x)
		if op%2 == 0 {
			s.insert(x)
			if !found {
				model = slices.Insert(model, i, x)
			}
		} else {
			s.delete(x)
			if found {
				model = slices.Delete(model, i, i+1)
			}
		}
		if op%100 == 0 || op == 5999 {
			var all []int
			s.all(func(x int) bool { all = append(all, x); return true })
			if !slices.Equal(all, model) || s.len() != len(model) {
				t.Fatalf("op %d: set differs from the model", op)
			}
		}
	}
	s.setSorted(nil)
	if s.len() != 0 || len(s.chunks) != 0 {
		t.Fatal("setSorted(nil) left items")
	}
}

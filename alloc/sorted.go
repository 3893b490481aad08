package alloc

import "sort"

// chunkMax bounds a chunk so an insert or delete moves at most chunkMax
// items, while lookups stay two binary searches (chunks, then items). With
// ~100k free extents that is ~400 chunks: cheap memmoves, no tree rotations.
const chunkMax = 512

// sortedSet is an ordered set of distinct items kept in a list of sorted
// chunks. Every chunk is non-empty; the chunks are ordered, so the last item
// of chunk i is less than the first item of chunk i+1.
//
// It is not safe for concurrent use; the owning AG's mutex guards it.
type sortedSet[T any] struct {
	less   func(a, b T) bool
	chunks [][]T
	n      int
}

func newSortedSet[T any](less func(a, b T) bool) sortedSet[T] {
	return sortedSet[T]{less: less}
}

func (s *sortedSet[T]) len() int { return s.n }

// chunkFor returns the index of the first chunk whose last item is >= key,
// or len(chunks) when key is greater than every item.
func (s *sortedSet[T]) chunkFor(key T) int {
	return sort.Search(len(s.chunks), func(i int) bool {
		c := s.chunks[i]
		return !s.less(c[len(c)-1], key)
	})
}

// lowerBound returns the position of the first item >= key; ci ==
// len(chunks) when there is none.
func (s *sortedSet[T]) lowerBound(key T) (ci, i int) {
	ci = s.chunkFor(key)
	if ci == len(s.chunks) {
		return ci, 0
	}
	c := s.chunks[ci]
	i = sort.Search(len(c), func(j int) bool { return !s.less(c[j], key) })
	return ci, i
}

// insert adds x; it reports false when an equal item is already present.
func (s *sortedSet[T]) insert(x T) bool {
	if len(s.chunks) == 0 {
		s.chunks = append(s.chunks, append(make([]T, 0, 16), x))
		s.n++
		return true
	}
	ci, i := s.lowerBound(x)
	if ci == len(s.chunks) {
		// Greater than everything: append to the last chunk.
		ci = len(s.chunks) - 1
		i = len(s.chunks[ci])
	} else if !s.less(x, s.chunks[ci][i]) {
		return false // equal item present
	}
	c := s.chunks[ci]
	c = append(c, x)
	copy(c[i+1:], c[i:])
	c[i] = x
	if len(c) > chunkMax {
		// Split in halves; the right half gets its own backing array so
		// later appends to the left cannot overwrite it.
		h := len(c) / 2
		right := make([]T, len(c)-h, chunkMax+1)
		copy(right, c[h:])
		c = c[:h:h]
		s.chunks = append(s.chunks, nil)
		copy(s.chunks[ci+2:], s.chunks[ci+1:])
		s.chunks[ci+1] = right
	}
	s.chunks[ci] = c
	s.n++
	return true
}

// delete removes the item equal to x; it reports whether one was present.
func (s *sortedSet[T]) delete(x T) bool {
	ci, i := s.lowerBound(x)
	if ci == len(s.chunks) || s.less(x, s.chunks[ci][i]) {
		return false
	}
	c := s.chunks[ci]
	copy(c[i:], c[i+1:])
	var zero T
	c[len(c)-1] = zero
	c = c[:len(c)-1]
	if len(c) == 0 {
		copy(s.chunks[ci:], s.chunks[ci+1:])
		s.chunks[len(s.chunks)-1] = nil
		s.chunks = s.chunks[:len(s.chunks)-1]
	} else {
		s.chunks[ci] = c
	}
	s.n--
	return true
}

// ceil returns the smallest item >= key.
func (s *sortedSet[T]) ceil(key T) (T, bool) {
	ci, i := s.lowerBound(key)
	if ci == len(s.chunks) {
		var zero T
		return zero, false
	}
	return s.chunks[ci][i], true
}

// floor returns the largest item <= key.
func (s *sortedSet[T]) floor(key T) (T, bool) {
	ci, i := s.lowerBound(key)
	if ci < len(s.chunks) && !s.less(key, s.chunks[ci][i]) {
		return s.chunks[ci][i], true // equal
	}
	// The item before the lower bound is the largest one < key.
	if i > 0 {
		return s.chunks[ci][i-1], true
	}
	if ci > 0 {
		c := s.chunks[ci-1]
		return c[len(c)-1], true
	}
	var zero T
	return zero, false
}

// last returns the greatest item.
func (s *sortedSet[T]) last() (T, bool) {
	if len(s.chunks) == 0 {
		var zero T
		return zero, false
	}
	c := s.chunks[len(s.chunks)-1]
	return c[len(c)-1], true
}

// ascend calls fn for every item >= key in order until fn returns false.
// fn must not modify the set.
func (s *sortedSet[T]) ascend(key T, fn func(T) bool) {
	ci, i := s.lowerBound(key)
	for ; ci < len(s.chunks); ci, i = ci+1, 0 {
		for _, x := range s.chunks[ci][i:] {
			if !fn(x) {
				return
			}
		}
	}
}

// all calls fn for every item in order until fn returns false.
func (s *sortedSet[T]) all(fn func(T) bool) {
	for _, c := range s.chunks {
		for _, x := range c {
			if !fn(x) {
				return
			}
		}
	}
}

// setSorted replaces the contents with items, which must be sorted and
// distinct; the set takes ownership of the slice. It builds half-full
// chunks in one pass, so loading n items costs O(n) instead of n inserts.
func (s *sortedSet[T]) setSorted(items []T) {
	const fill = chunkMax / 2 // room to grow before the first split
	s.chunks = make([][]T, 0, (len(items)+fill-1)/fill)
	for i := 0; i < len(items); i += fill {
		j := min(i+fill, len(items))
		// Full slice expression: an insert into a chunk reallocates it
		// rather than writing over the next chunk's items.
		s.chunks = append(s.chunks, items[i:j:j])
	}
	s.n = len(items)
}

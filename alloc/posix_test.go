package alloc

import (
	"reflect"
	"testing"
)

// FITRIM's range: only free space inside [lo, hi) is trimmed, extents
// crossing an edge are clipped, and minLen applies to the free extent.
func TestTrimRangeFITRIM(t *testing.T) {
	a := newTest(t, Geometry{AGCount: 2, AGBlocks: 100, TotalBlocks: 200}, Options{Policy: PolicyInode})
	if err := a.MarkUsed(0, 200); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Extent{{10, 2}, {30, 20}, {60, 5}, {120, 40}, {180, 1}} {
		if err := a.Free(e.Start, e.Len); err != nil {
			t.Fatal(err)
		}
	}
	before := freeList(a)
	var seen []Extent
	n, err := a.TrimRange(40, 90, 3, func(e Extent) error {
		seen = append(seen, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Extent{{40, 10}, {60, 5}, {120, 10}}
	if !reflect.DeepEqual(seen, want) || n != 25 {
		t.Errorf("TrimRange(40, 90, 3) trimmed %v (%d blocks), want %v (25)", seen, n, want)
	}
	if got := freeList(a); !reflect.DeepEqual(got, before) {
		t.Errorf("free space changed: %v, want %v", got, before)
	}
	// An empty range trims nothing.
	if n, _ := a.TrimRange(300, 100, 1, func(Extent) error { return nil }); n != 0 {
		t.Errorf("range past the end trimmed %d blocks", n)
	}
}

// Stream ids above the device's count wrap onto its streams, never past it.
func TestDeviceStream(t *testing.T) {
	for _, c := range []struct{ id, max, want uint32 }{
		{0, 4, 0}, {1, 4, 1}, {4, 4, 4}, {5, 4, 1}, {8, 4, 4}, {9, 4, 1},
		{7, 2, 1}, {6, 2, 2}, {3, 1, 1}, {5, 0, 5}, {^uint32(0), 3, (^uint32(0)-1)%3 + 1},
	} {
		if got := DeviceStream(c.id, c.max); got != c.want {
			t.Errorf("DeviceStream(%d, %d) = %d, want %d", c.id, c.max, got, c.want)
		}
		if c.max > 0 && DeviceStream(c.id, c.max) > c.max {
			t.Errorf("DeviceStream(%d, %d) above the device's streams", c.id, c.max)
		}
	}
}

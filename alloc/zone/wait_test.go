package zone

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// A writer that finds only garbage waits, and the reset of a reclaimed
// zone wakes it with blocks.
func TestWaitingWriterWokenByReset(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 5, First: 0}
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1})
	var es []Extent
	for range 4 {
		es = append(es, mustAlloc(t, a, Request{Ino: 1, Len: 8}))
	}
	if err := a.Free(es[1].Start, 8); err != nil { // zone 1 all garbage
		t.Fatal(err)
	}
	type result struct {
		e   Extent
		err error
	}
	res := make(chan result, 1)
	go func() {
		e, err := a.Alloc(context.Background(), Request{Ino: 2, Len: 3})
		res <- result{e, err}
	}()
	<-a.ReclaimWanted() // the waiting writer asked for reclaim
	for a.Stats().Waits == 0 {
		runtime.Gosched()
	}
	select {
	case r := <-res:
		t.Fatalf("writer did not wait: %+v", r)
	default:
	}
	v, ok := a.Victim()
	if !ok || v.Index != 1 || v.Live != 0 {
		t.Fatalf("victim %+v %v", v, ok)
	}
	if err := a.Reset(v.Index); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil || a.zoneNo(r.e.Start) != 1 || r.e.Len != 3 {
		t.Fatalf("woken writer got %+v", r)
	}
	if err := a.Done(r.e, nil); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, a)
}

// A writer waiting for a zone gives up when its context ends.
func TestWaitEndsWithContext(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 4, First: 0}
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1})
	e := mustAlloc(t, a, Request{Ino: 1, Len: 8})
	for range 2 {
		mustAlloc(t, a, Request{Ino: 1, Len: 8})
	}
	if err := a.Free(e.Start, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := a.Alloc(ctx, Request{Ino: 2, Len: 1})
		res <- err
	}()
	for a.Stats().Waits == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

// A zone full at its allocation pointer holds its active resource until
// its last write is Done; a writer needing a new zone meanwhile waits for
// that, not for reclaim.
func TestWaitForDrain(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 10, First: 0, MaxOpen: 3, MaxActive: 3}
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 2})
	// Generic slots 0 and 1, reclaim slot 2: limit 3. Fill slot 0's zone
	// without completing, then open slot 1's and the reclaim slot's.
	full, _ := a.Alloc(done, Request{Ino: 0, Len: 8})
	mustAlloc(t, a, Request{Ino: 1, Len: 1})
	r, err := a.AllocReclaim(done, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Done(r, nil)
	// Slot 0 needs a zone: 3 active (one draining).
	if _, err := a.Alloc(done, Request{Ino: 0, Len: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("at the active limit: %v, want a wait", err)
	}
	if err := a.Done(full, nil); err != nil {
		t.Fatal(err)
	}
	e := mustAlloc(t, a, Request{Ino: 0, Len: 1})
	if a.zoneNo(e.Start) == a.zoneNo(full.Start) {
		t.Fatal("allocated in the full zone")
	}
	if st := a.Stats(); st.Active != 3 {
		t.Fatalf("active %d", st.Active)
	}
	mustCheck(t, a)
}

// Parallel writers, frees and a reclaimer, under -race: the per-zone and
// per-slot locks keep the counts exact.
func TestParallel(t *testing.T) {
	geo := Geometry{ZoneBlocks: 64, CapBlocks: 64, Zones: 64, First: 2, MaxOpen: 14, MaxActive: 14}
	a := newTest(t, geo, newFake(), Options{Streams: 8, Reserve: 2, Cache: true})
	ops := 3000
	if testing.Short() {
		ops = 600
	}
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex // guards live: the "extent tree"
	live := map[Extent]uint32{}
	var wg, rg sync.WaitGroup
	rg.Add(1)
	go func() { // reclaimer
		defer rg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.ReclaimWanted():
			}
			for a.NeedReclaim() {
				v, ok := a.Victim()
				if !ok {
					break
				}
				zs, ze := v.Start, v.Start+geo.ZoneBlocks
				mu.Lock()
				for e, s := range live {
					if e.Start < zs || e.Start >= ze {
						continue
					}
					for left := e.Len; left > 0; {
						c, err := a.AllocReclaim(ctx, s, left)
						if err != nil {
							mu.Unlock()
							if ctx.Err() == nil {
								t.Error(err)
							}
							return
						}
						if err := a.Done(c, nil); err != nil {
							t.Error(err)
						}
						live[c] = s
						left -= c.Len
					}
					if err := a.Free(e.Start, e.Len); err != nil {
						t.Error(err)
					}
					delete(live, e)
				}
				mu.Unlock()
				if err := a.Reset(v.Index); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []Extent
			for range ops {
				stream := uint32(w%4 + 1)
				e, err := a.Alloc(ctx, Request{Ino: uint64(w*100 + rng.IntN(4)), Stream: stream, Len: 1 + rng.Uint64N(8), Random: rng.IntN(2) == 0})
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Done(e, nil); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				live[e] = stream
				mine = append(mine, e)
				// Free an older extent of this writer's, if reclaim has
				// not moved it.
				if len(mine) > 20 {
					k := rng.IntN(len(mine))
					old := mine[k]
					mine[k] = mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					if _, ok := live[old]; ok {
						if err := a.Free(old.Start, old.Len); err != nil {
							t.Error(err)
						}
						delete(live, old)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	stop()
	rg.Wait()
	mustCheck(t, a)
	want := map[int]uint64{}
	for e := range live {
		want[a.zoneNo(e.Start)] += e.Len
	}
	for _, z := range a.Zones() {
		if z.Live != want[z.Index] {
			t.Fatalf("zone %d: %d live, extents hold %d", z.Index, z.Live, want[z.Index])
		}
	}
	t.Logf("stats %+v space %+v", a.Stats(), a.Space())
}

// NoWait returns the wake channel instead of waiting; a reset closes it.
func TestNoWaitReturnsWake(t *testing.T) {
	geo := Geometry{ZoneBlocks: 8, CapBlocks: 8, Zones: 5, First: 0}
	a := newTest(t, geo, newFake(), Options{Reserve: 1, GenericSlots: 1})
	var es []Extent
	for range 4 {
		es = append(es, mustAlloc(t, a, Request{Ino: 1, Len: 8}))
	}
	if err := a.Free(es[2].Start, 8); err != nil {
		t.Fatal(err)
	}
	_, err := a.Alloc(context.Background(), Request{Ino: 2, Len: 3, NoWait: true})
	var ww *WouldWait
	if !errors.As(err, &ww) || ww.Wake == nil {
		t.Fatalf("NoWait alloc: %v, want *WouldWait", err)
	}
	select {
	case <-ww.Wake:
		t.Fatal("wake closed before any zone came back")
	default:
	}
	v, ok := a.Victim()
	if !ok || v.Index != 2 {
		t.Fatalf("victim %+v %v", v, ok)
	}
	if err := a.Reset(v.Index); err != nil {
		t.Fatal(err)
	}
	<-ww.Wake
	e, err := a.Alloc(context.Background(), Request{Ino: 2, Len: 3, NoWait: true})
	if err != nil || a.zoneNo(e.Start) != 2 {
		t.Fatalf("after reset: %+v %v", e, err)
	}
	if err := a.Done(e, nil); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, a)
}

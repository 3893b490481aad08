package zone

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

// fakeDev records zone actions; fail makes the next actions of op fail.
type fakeDev struct {
	mu   sync.Mutex
	ops  map[backend.ZoneOp]int
	fail map[backend.ZoneOp]error
}

func newFake() *fakeDev {
	return &fakeDev{ops: map[backend.ZoneOp]int{}, fail: map[backend.ZoneOp]error{}}
}

func (d *fakeDev) ZoneMgmt(op backend.ZoneOp, off int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.fail[op]; err != nil {
		return fmt.Errorf("fake %v at %d: %w", op, off, err)
	}
	d.ops[op]++
	return nil
}

func (d *fakeDev) count(op backend.ZoneOp) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ops[op]
}

func newTest(t testing.TB, geo Geometry, dev Device, o Options) *Allocator {
	t.Helper()
	if o.BlockSize == 0 {
		o.BlockSize = 4096
	}
	a, err := New(geo, dev, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// done is a context that is already over: Alloc returns instead of
// waiting, so a single-goroutine test can run reclaim itself.
var done = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func mustAlloc(t testing.TB, a *Allocator, r Request) Extent {
	t.Helper()
	e, err := a.Alloc(done, r)
	if err != nil {
		t.Fatalf("alloc %+v: %v", r, err)
	}
	if err := a.Done(e, nil); err != nil {
		t.Fatalf("done %+v: %v", e, err)
	}
	return e
}

func mustCheck(t testing.TB, a *Allocator) {
	t.Helper()
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

func (a *Allocator) zoneNo(b uint64) int { return int(b / a.geo.ZoneBlocks) }

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add() int64 { return c.n.Add(1) - 1 }

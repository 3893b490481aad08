package tree

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time: on a shared, loaded machine
// it is a steadier measure than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a "cpu-ns/op" metric covering the benchmark loop (all of
// the process's goroutines, GC included).
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// Benchmarks run on a tree of TREE_BENCH_N entries (default 1M; e.g.
// TREE_BENCH_N=10000000 for 10M) with 16-byte keys and values, the shape of
// extent and free-space records, on an in-memory device.
func benchN() int {
	if s := os.Getenv("TREE_BENCH_N"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 1_000_000
}

func benchKey(i uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, i*0x9E3779B97F4A7C15)
	binary.BigEndian.PutUint64(k[8:], i)
	return k
}

type benchTree struct {
	p    *memPager
	c    *Cache
	tr   *Tree
	n    uint64
	next uint64 // next new key for Put
}

var (
	benchOnce    sync.Once
	benchFixture *benchTree
)

// checkpoint writes the dirty nodes to the fake device (no copy: Snapshot's
// buffers are fresh) and makes frees reusable.
func (bt *benchTree) checkpoint() {
	bt.p.mu.Lock()
	freed := bt.p.pending
	bt.p.pending = nil
	bt.p.mu.Unlock()
	_, writes := bt.tr.Snapshot()
	bt.p.mu.Lock()
	for _, w := range writes {
		bt.p.dev[w.Blk] = w.Data
	}
	bt.p.mu.Unlock()
	bt.tr.Written()
	bt.p.mu.Lock()
	bt.p.reusable = append(bt.p.reusable, freed...)
	bt.p.reusable = append(bt.p.reusable, bt.p.pending...)
	bt.p.pending = nil
	bt.p.mu.Unlock()
}

func fixture(b *testing.B) *benchTree {
	benchOnce.Do(func() {
		n := benchN()
		c, err := NewCache(4 << 30) // hot cache: everything fits
		if err != nil {
			b.Fatal(err)
		}
		p := newMemPager(4096)
		tr, err := Open(p, c, testCfg(4096), 0)
		if err != nil {
			b.Fatal(err)
		}
		bt := &benchTree{p: p, c: c, tr: tr, n: uint64(n), next: uint64(n)}
		start := time.Now()
		val := make([]byte, 16)
		for i := range uint64(n) {
			if err := tr.Put(benchKey(i), val); err != nil {
				b.Fatal(err)
			}
			if i%65536 == 65535 {
				bt.checkpoint()
			}
		}
		bt.checkpoint()
		build := time.Since(start)
		// Warm the cache: ristretto drops Sets under bursts, so touch everything.
		for range 2 {
			for i := range uint64(n) {
				if _, ok, err := tr.Get(benchKey(i)); !ok || err != nil {
					b.Fatalf("warm Get %d: %v %v", i, ok, err)
				}
			}
		}
		b.Logf("built %d entries in %v (%.2f µs/put), %d blocks", n, build, float64(build.Microseconds())/float64(n), len(p.dev))
		benchFixture = bt
	})
	return benchFixture
}

func BenchmarkGet(b *testing.B) {
	bt := fixture(b)
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = benchKey(r.Uint64N(bt.n))
	}
	h0, m0 := bt.c.Metrics()
	b.ResetTimer()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		if _, ok, err := bt.tr.Get(keys[i&4095]); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	h1, m1 := bt.c.Metrics()
	if d := (h1 - h0) + (m1 - m0); d > 0 {
		b.ReportMetric(float64(h1-h0)/float64(d)*100, "%hit")
	}
}

// BenchmarkGetRandom draws a fresh random key each time (no small working set).
func BenchmarkGetRandom(b *testing.B) {
	bt := fixture(b)
	r := rand.New(rand.NewPCG(3, 4))
	k := make([]byte, 16)
	defer reportCPU(b)()
	for b.Loop() {
		i := r.Uint64N(bt.n)
		binary.BigEndian.PutUint64(k, i*0x9E3779B97F4A7C15)
		binary.BigEndian.PutUint64(k[8:], i)
		if _, ok, err := bt.tr.Get(k); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkPut inserts new random keys, checkpointing every 64Ki puts (the
// checkpoint cost is included).
func BenchmarkPut(b *testing.B) {
	bt := fixture(b)
	val := make([]byte, 16)
	defer reportCPU(b)()
	for b.Loop() {
		if err := bt.tr.Put(benchKey(bt.next), val); err != nil {
			b.Fatal(err)
		}
		bt.next++
		if bt.next%65536 == 0 {
			bt.checkpoint()
		}
	}
	b.StopTimer()
	bt.checkpoint()
}

// BenchmarkSeekLE is the "which extent contains block x" lookup.
func BenchmarkSeekLE(b *testing.B) {
	bt := fixture(b)
	r := rand.New(rand.NewPCG(5, 6))
	k := make([]byte, 16)
	defer reportCPU(b)()
	for b.Loop() {
		binary.BigEndian.PutUint64(k, r.Uint64())
		if _, _, _, err := bt.tr.SeekLE(k); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshot measures encoding dirty nodes (reported per node and as
// bytes of node images produced).
func BenchmarkSnapshot(b *testing.B) {
	p := newMemPager(4096)
	tr, err := Open(p, nil, testCfg(4096), 0)
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 16)
	for i := range uint64(100_000) {
		if err := tr.Put(benchKey(i), val); err != nil {
			b.Fatal(err)
		}
	}
	nodes := tr.Dirty()
	b.SetBytes(int64(nodes * 4096))
	cpu0 := cpuTime()
	for b.Loop() {
		// Re-dirty the same nodes without copying: move them back.
		tr.mu.Lock()
		for blk, n := range tr.inflight {
			tr.dirty[blk] = n
		}
		clear(tr.inflight)
		clear(tr.images)
		tr.mu.Unlock()
		if _, w := tr.Snapshot(); len(w) != nodes {
			b.Fatalf("%d writes, want %d", len(w), nodes)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*nodes), "ns/node")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*nodes), "cpu-ns/node")
}

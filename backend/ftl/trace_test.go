package ftl

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

func replayFile(t *testing.T, path string, g Geometry, o ReplayOptions) ReplayResult {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := OpenTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(tr, g, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A live run recorded with a trace, replayed into a fresh model of the
// same drive, gives exactly the live counters: the trace keeps the order
// in which the model counted, even with writers racing each other.
func TestReplayReproducesLiveRun(t *testing.T) {
	path, l := newImage(t, 48<<20, "op=10,ru=256K,handles=4,precondition=seq")
	d, _ := openDev(t, path)
	trace := filepath.Join(t.TempDir(), "trace")
	tw, err := CreateTrace(trace, TraceHeader{Size: d.Size(), Handles: 4, Kind: d.Kind()})
	if err != nil {
		t.Fatal(err)
	}
	if Traced(d, tw) != backend.Device(d) {
		t.Fatal("a modelled drive was wrapped instead of recording itself")
	}
	if err := d.Precondition(); err != nil {
		t.Fatal(err)
	}
	size := d.Size()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			buf := make([]byte, 64<<10)
			for i := range 600 {
				n := int64(4096 * (1 + rng.IntN(16)))
				off := rng.Int64N(size/4096-16) * 4096
				switch {
				case i%50 == 49:
					if err := d.Flush(); err != nil {
						t.Error(err)
					}
				case i%17 == 3:
					if err := d.Discard(off, n); err != nil {
						t.Error(err)
					}
				default:
					if err := d.WriteAt(buf[:n], off, uint32(w)); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	live, err := d.FDPStats()
	if err != nil || live.ModelError != "" {
		t.Fatalf("live stats: %v %q", err, live.ModelError)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	res := replayFile(t, trace, l.Geometry, ReplayOptions{})
	if res.Host != live.HostBytesWritten || res.Media != live.MediaBytesWritten || res.Erased != live.MediaBytesErased {
		t.Fatalf("replay host/media/erased %d/%d/%d, live %d/%d/%d", res.Host, res.Media, res.Erased,
			live.HostBytesWritten, live.MediaBytesWritten, live.MediaBytesErased)
	}
	for i, h := range res.Handles {
		if h.Host != live.Handles[i].HostBytes || h.Media != live.Handles[i].MediaBytes {
			t.Fatalf("handle %d: replay %d/%d, live %d/%d", i+1, h.Host, h.Media, live.Handles[i].HostBytes, live.Handles[i].MediaBytes)
		}
	}
	if live.MediaBytesWritten == live.HostBytesWritten {
		t.Fatal("no GC in the live run: the comparison proves little")
	}
	t.Logf("live and replay: host %d media %d erased %d (WAF %.3f) over %d records", res.Host, res.Media, res.Erased, res.WAF, res.Records)

	// The same trace on other terms: without discards GC copies more;
	// with every stream mapped to one handle only that handle counts.
	nod := replayFile(t, trace, l.Geometry, ReplayOptions{NoDiscard: true})
	if nod.Host != res.Host || nod.Media <= res.Media {
		t.Fatalf("--no-discard: host %d media %d, with discards %d/%d", nod.Host, nod.Media, res.Host, res.Media)
	}
	one := replayFile(t, trace, l.Geometry, ReplayOptions{Map: map[uint32]int{0: 2, 1: 2, 2: 2, 3: 2}, Interval: 4 << 20})
	for _, h := range one.Handles {
		if (h.Handle == 3) != (h.Host > 0) {
			t.Fatalf("mapped to handle 3: %+v", one.Handles)
		}
	}
	if len(one.Intervals) < 2 {
		t.Fatalf("%d intervals", len(one.Intervals))
	}
	var sum uint64
	for _, iv := range one.Intervals {
		sum += iv.Host
	}
	if sum != one.Host {
		t.Fatalf("intervals add up to %d host bytes, the run to %d", sum, one.Host)
	}
}

// A batched trim tells the drive of every range discarded since the last
// one, except those written again meanwhile.
func TestReplayTrimEvery(t *testing.T) {
	g, _ := ParseGeometry("op=14,ru=64K,handles=1")
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	tw, err := CreateTrace(trace, TraceHeader{Size: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tw.Add(Record{Op: OpWrite, Off: 0, Len: 8 << 20})
	tw.Add(Record{Op: OpDiscard, Off: 0, Len: 4 << 20})
	tw.Add(Record{Op: OpWrite, Off: 0, Len: 1 << 20}) // written again: must stay valid
	tw.Add(Record{Op: OpWrite, Off: 4 << 20, Len: 4096})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(trace)
	defer f.Close()
	tr, err := OpenTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(tr, g, ReplayOptions{TrimEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 4 {
		t.Fatalf("%d records", res.Records)
	}
	mapped := 0
	for lp, p := range res.model.l2p {
		if p != none {
			mapped++
		} else if lp < 256 || lp >= 1024 {
			t.Fatalf("page %d trimmed: it was written again, or never discarded", lp)
		}
	}
	if want := 2048 - 768; mapped != want {
		t.Fatalf("%d pages valid after the batched trim, want %d", mapped, want)
	}
}

// A damaged or foreign trace is refused with ErrTrace, never a panic.
func TestBadTrace(t *testing.T) {
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"empty":   nil,
		"foreign": []byte("hello world, this is not a trace at all, not even close, sorry."),
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		f, _ := os.Open(p)
		if _, err := OpenTrace(f); !errors.Is(err, ErrTrace) {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	p := filepath.Join(dir, "badrec")
	tw, err := CreateTrace(p, TraceHeader{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tw.Add(Record{Op: 9, Off: 0, Len: 4096})
	tw.Close()
	f, _ := os.Open(p)
	defer f.Close()
	tr, err := OpenTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := ParseGeometry("op=50,ru=16K,handles=1")
	if _, err := Replay(tr, g, ReplayOptions{}); !errors.Is(err, ErrTrace) {
		t.Fatalf("bad record: %v", err)
	}
	if _, err := CreateTrace(p, TraceHeader{Size: 2 << 20}); !errors.Is(err, ErrTrace) {
		t.Fatalf("appending a trace of another device: %v", err)
	}
}

// A trace that cannot be written stops recording, says so once, and never
// fails the device call it records.
func TestTraceFailureReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dev, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	tw, err := CreateTrace(filepath.Join(t.TempDir(), "trace"), TraceHeader{Size: dev.Size()})
	if err != nil {
		t.Fatal(err)
	}
	var warns []string
	tw.SetWarn(func(s string) { warns = append(warns, s) })
	d := Traced(dev, tw)
	tw.f.Close() // the trace's file goes away under it
	for range 2 {
		if err := d.WriteAt(make([]byte, 4096), 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := d.Flush(); err != nil {
			t.Fatalf("Flush failed with the trace: %v", err)
		}
	}
	if len(warns) != 1 || tw.Err() == nil {
		t.Fatalf("warnings %q, err %v", warns, tw.Err())
	}
	_ = d.Close()
}

// mkfs discards the whole device before it preconditions: a batched trim
// must not trim the preconditioned pages afterwards.
func TestReplayTrimAfterPrecondition(t *testing.T) {
	g, _ := ParseGeometry("op=14,ru=64K,handles=1,precondition=seq")
	trace := filepath.Join(t.TempDir(), "trace")
	tw, err := CreateTrace(trace, TraceHeader{Size: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tw.Add(Record{Op: OpDiscard, Off: 0, Len: 8 << 20})
	tw.Add(Record{Op: OpPrecondition, Off: 3, Len: 1})
	tw.Add(Record{Op: OpWrite, Off: 0, Len: 4096})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(trace)
	defer f.Close()
	tr, err := OpenTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Replay(tr, g, ReplayOptions{TrimEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	for lp, p := range res.model.l2p {
		if p == none {
			t.Fatalf("page %d trimmed after the precondition wrote it", lp)
		}
	}
}

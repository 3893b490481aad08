package faulty

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

const devSize = 1 << 20

func newDev(t *testing.T, seed int64) (*Device, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dev.img")
	if err := os.WriteFile(p, make([]byte, devSize), 0o600); err != nil {
		t.Fatal(err)
	}
	inner, err := backend.OpenFile(p, false)
	if err != nil {
		t.Fatal(err)
	}
	d := New(inner, seed)
	t.Cleanup(func() { d.Revive(); d.Close() })
	return d, p
}

func fill(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

func read(t *testing.T, d *Device, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	if err := d.ReadAt(p, off); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustWrite(t *testing.T, d *Device, p []byte, off int64) {
	t.Helper()
	if err := d.WriteAt(p, off, 0); err != nil {
		t.Fatal(err)
	}
}

func TestCutDropsUnflushedKeepsFlushed(t *testing.T) {
	d, img := newDev(t, 1)
	mustWrite(t, d, fill(0xAA, 8192), 0)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, d, fill(0xBB, 4096), 4096) // overwrites flushed data
	mustWrite(t, d, fill(0xCC, 100), 20000) // new data
	if err := d.Discard(0, 4096); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Writes != 3 || s.Flushes != 1 || s.Discards != 1 || s.Pending != 3 {
		t.Fatalf("stats %+v", s)
	}
	if err := d.PowerCut(CutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.ReadAt(make([]byte, 1), 0); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrPoweredOff) {
		t.Fatalf("read while off: %v", err)
	}
	if err := d.WriteAt([]byte{1}, 0, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write while off: %v", err)
	}
	if err := d.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush while off: %v", err)
	}
	d.Revive()
	if got := read(t, d, 0, 8192); !bytes.Equal(got, fill(0xAA, 8192)) {
		t.Fatal("flushed data not intact after cut")
	}
	if got := read(t, d, 20000, 100); !bytes.Equal(got, make([]byte, 100)) {
		t.Fatal("unflushed write survived the cut")
	}
	// The rollback is on the media itself, not only in the wrapper's view.
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw[:8192], fill(0xAA, 8192)) || !bytes.Equal(raw[20000:20100], make([]byte, 100)) {
		t.Fatal("image file does not reflect the cut")
	}
	if s := d.Stats(); s.Pending != 0 || s.Cuts != 1 {
		t.Fatalf("stats after cut %+v", s)
	}
}

// TestKeptPrefix checks that what survives a cut is always the state after
// some prefix of the unflushed writes, and that different seeds exercise
// different prefixes.
func TestKeptPrefix(t *testing.T) {
	seen := map[int]bool{}
	for seed := range int64(40) {
		d, _ := newDev(t, seed)
		const n = 5
		for i := range n {
			// Overlapping writes, so order matters.
			mustWrite(t, d, fill(byte(i+1), 4096), int64(i)*2048)
		}
		if err := d.PowerCut(CutOptions{KeepRandomPrefix: true}); err != nil {
			t.Fatal(err)
		}
		d.Revive()
		got := read(t, d, 0, 16384)
		k := -1
		for j := 0; j <= n; j++ {
			want := make([]byte, 16384)
			for i := range j {
				copy(want[i*2048:], fill(byte(i+1), 4096))
			}
			if bytes.Equal(got, want) {
				k = j
				break
			}
		}
		if k < 0 {
			t.Fatalf("seed %d: contents match no prefix of the writes", seed)
		}
		seen[k] = true
	}
	if len(seen) < 3 {
		t.Fatalf("40 seeds kept only prefixes %v", seen)
	}
}

func TestTornWriteKeepsSectorPrefix(t *testing.T) {
	const sectors = 8
	partial := 0
	for seed := range int64(40) {
		d, _ := newDev(t, seed)
		mustWrite(t, d, fill(0x11, 4096), 0)
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		// Unaligned start: the first sector boundary is 512, not 100.
		off := int64(100)
		mustWrite(t, d, fill(0xEE, sectors*512), off)
		if err := d.PowerCut(CutOptions{KeepRandomPrefix: true, TearLast: true}); err != nil {
			t.Fatal(err)
		}
		d.Revive()
		got := read(t, d, 0, 8192)
		before := make([]byte, 8192)
		copy(before, fill(0x11, 4096))
		// Landed bytes: [off, cut) where cut is off or a sector boundary
		// strictly inside the write.
		cut := off
		for cut < off+sectors*512 && got[cut] == 0xEE {
			cut++
		}
		if cut != off && cut%512 != 0 {
			t.Fatalf("seed %d: tear at %d, not a sector boundary", seed, cut)
		}
		if cut == off+sectors*512 {
			t.Fatalf("seed %d: torn write landed whole", seed)
		}
		want := append([]byte(nil), before...)
		copy(want[off:cut], fill(0xEE, int(cut-off)))
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: bytes outside the landed prefix changed", seed)
		}
		if cut > off {
			partial++
		}
	}
	if partial == 0 {
		t.Fatal("no seed produced a partly landed write")
	}
}

func TestReproducible(t *testing.T) {
	run := func(seed int64) []byte {
		d, img := newDev(t, seed)
		for i := range 20 {
			mustWrite(t, d, fill(byte(i+1), 3000), int64(i)*1777)
			if i == 7 {
				if err := d.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := d.PowerCut(CutOptions{KeepRandomPrefix: true, TearLast: true}); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, seed := range []int64{3, 99, -5} {
		if !bytes.Equal(run(seed), run(seed)) {
			t.Fatalf("seed %d: two runs left different images", seed)
		}
	}
}

func TestInjectedErrors(t *testing.T) {
	d, _ := newDev(t, 1)
	d.FailWrites(func(off, n int64) bool { return off < 4096+512 && off+n > 4096 })
	if err := d.WriteAt(fill(1, 1024), 4000, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected write: %v", err)
	}
	if err := d.Discard(4096, 512); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected discard: %v", err)
	}
	mustWrite(t, d, fill(2, 1024), 8192) // outside the predicate
	if got := read(t, d, 4000, 1024); !bytes.Equal(got, make([]byte, 1024)) {
		t.Fatal("failed write touched the media")
	}
	d.FailWrites(nil)
	mustWrite(t, d, fill(3, 1024), 4000)

	d.FailReads(func(off, n int64) bool { return off == 8192 })
	if err := d.ReadAt(make([]byte, 10), 8192); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected read: %v", err)
	}
	read(t, d, 8193, 10)
	d.FailReads(nil)

	d.FailFlushes(1)
	if err := d.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected flush: %v", err)
	}
	if s := d.Stats(); s.Pending != 2 || s.Flushes != 0 {
		t.Fatalf("failed flush cleared pending writes: %+v", s)
	}
	// The writes a failed flush would have covered are still lost by a cut.
	if err := d.PowerCut(CutOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Revive()
	if got := read(t, d, 4000, 5000); !bytes.Equal(got, make([]byte, 5000)) {
		t.Fatal("writes before a failed flush survived the cut")
	}
	mustWrite(t, d, fill(4, 100), 0)
	if err := d.Flush(); err != nil {
		t.Fatalf("flush after the injected failure: %v", err)
	}
}

func TestCloseWhileOffKeepsInner(t *testing.T) {
	d, _ := newDev(t, 1)
	mustWrite(t, d, fill(7, 512), 0)
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.PowerCut(CutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d.Revive()
	if got := read(t, d, 0, 512); !bytes.Equal(got, fill(7, 512)) {
		t.Fatal("data lost across close-while-off and revive")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d.Revive()
	if err := d.ReadAt(make([]byte, 1), 0); err == nil {
		t.Fatal("read after a real close succeeded")
	}
}

func TestConcurrent(t *testing.T) {
	d, _ := newDev(t, 1)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				off := int64(g*65536 + i*512)
				if err := d.WriteAt(fill(byte(g+1), 512), off, uint32(g)); err != nil {
					t.Error(err)
					return
				}
				if i%10 == 0 {
					if err := d.Flush(); err != nil {
						t.Error(err)
						return
					}
				}
				_ = d.Stats()
			}
		}()
	}
	wg.Wait()
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := d.PowerCut(CutOptions{}); err != nil {
		t.Fatal(err)
	}
	d.Revive()
	for g := range 4 {
		if got := read(t, d, int64(g*65536), 50*512); !bytes.Equal(got, fill(byte(g+1), 50*512)) {
			t.Fatalf("goroutine %d: flushed data lost", g)
		}
	}
	if s := d.Stats(); s.Writes != 200 {
		t.Fatalf("writes %d", s.Writes)
	}
}

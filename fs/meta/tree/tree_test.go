package tree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
)

// randKey draws from a small key space (so puts replace and deletes hit)
// with lengths from 0 to 300 bytes; the length is a function of the index
// so a key is always the same bytes.
func randKey(r *rand.Rand, space int) []byte {
	i := r.IntN(space)
	n := 8
	switch i % 5 {
	case 0:
		n = 0
	case 1:
		n = 300
	case 2:
		n = 40
	}
	k := make([]byte, 8+n)
	binary.BigEndian.PutUint64(k, uint64(i)*2654435761%uint64(space*4))
	for j := 8; j < len(k); j++ {
		k[j] = byte(i + j)
	}
	return k
}

func randVal(r *rand.Rand, maxLen int) []byte {
	n := r.IntN(40)
	switch r.IntN(10) {
	case 0:
		n = maxLen
	case 1:
		n = r.IntN(maxLen + 1)
	case 2:
		n = 0
	}
	v := make([]byte, n)
	for j := range v {
		v[j] = byte(r.Uint32())
	}
	return v
}

// seekLEModel is the last model key <= key.
func seekLEModel(ks []string, key string) (string, bool) {
	i := sort.SearchStrings(ks, key)
	if i < len(ks) && ks[i] == key {
		return ks[i], true
	}
	if i == 0 {
		return "", false
	}
	return ks[i-1], true
}

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		ns    int
		space int
		ops   int
		big   bool
	}{
		{1, 4096, 3000, 30000, false},
		{2, 4096, 200, 20000, false},
		{3, 8192, 5000, 20000, false},
		{4, 4096, 20000, 30000, false},
		// Long keys only: internal nodes hold ~12 separators, so internal
		// nodes split, merge and redistribute often.
		{5, 4096, 8000, 30000, true},
	} {
		t.Run(fmt.Sprintf("seed%d-ns%d", tc.seed, tc.ns), func(t *testing.T) {
			ops := tc.ops
			if testing.Short() { // scripts/test.sh; scripts/soak.sh runs them all
				ops /= 2
			}
			runModel(t, tc.seed, tc.ns, tc.space, ops, tc.big)
		})
	}
}

// bigKey is a 300-byte key with the index near the end, so prefixes tie.
func bigKey(r *rand.Rand, space int) []byte {
	return fmt.Appendf(nil, "%0290d%010d", 0, r.IntN(space))
}

func runModel(t *testing.T, seed uint64, ns, space, ops int, big bool) {
	r := rand.New(rand.NewPCG(seed, seed*77))
	h := newHarness(t, ns, 64<<10) // small: clean nodes get evicted and re-read
	m := model{}
	var sorted []string // m's keys in order, kept incrementally
	var inflight *pendingCP
	maxE := MaxEntry(ns)
	// Phases bias puts versus deletes so the tree grows tall, then shrinks
	// to nothing (merges, root collapse), then grows again.
	for op := range ops {
		putBias := 70
		if phase := op * 3 / ops; phase == 1 {
			putBias = 25
		}
		k := randKey(r, space)
		if big {
			k = bigKey(r, space)
		}
		switch x := r.IntN(100); {
		case x < putBias:
			v := randVal(r, maxE-len(k))
			if big {
				v = v[:min(len(v), 8)]
			}
			if err := h.tr.Put(k, v); err != nil {
				t.Fatalf("op %d Put: %v", op, err)
			}
			if _, ok := m[string(k)]; !ok {
				i := sort.SearchStrings(sorted, string(k))
				sorted = insertAt(sorted, i, string(k))
			}
			m[string(k)] = string(v)
		case x < 90:
			existed, err := h.tr.Delete(k)
			if err != nil {
				t.Fatalf("op %d Delete: %v", op, err)
			}
			if _, ok := m[string(k)]; ok != existed {
				t.Fatalf("op %d Delete existed=%v, model %v", op, existed, ok)
			}
			if existed {
				sorted = removeAt(sorted, sort.SearchStrings(sorted, string(k)))
			}
			delete(m, string(k))
		case x < 94:
			v, ok, err := h.tr.Get(k)
			mv, mok := m[string(k)]
			if err != nil || ok != mok || string(v) != mv {
				t.Fatalf("op %d Get: %v %v, model %v", op, ok, err, mok)
			}
		case x < 97:
			gk, gv, ok, err := h.tr.SeekLE(k)
			mk, mok := seekLEModel(sorted, string(k))
			if err != nil || ok != mok || (ok && (string(gk) != mk || string(gv) != m[mk])) {
				t.Fatalf("op %d SeekLE(%x): %x %v %v, model %x %v", op, k, gk, ok, err, mk, mok)
			}
			// Around: the same predecessor, and the first key after k.
			var le, next Entry
			if err := h.tr.Update(func(tx *Tx) (err error) { le, next, err = tx.Around(k); return err }); err != nil {
				t.Fatalf("op %d Around: %v", op, err)
			}
			if le.OK != mok || (mok && (string(le.Key) != mk || string(le.Val) != m[mk])) {
				t.Fatalf("op %d Around(%x) before: %x %v, model %x %v", op, k, le.Key, le.OK, mk, mok)
			}
			ni := sort.SearchStrings(sorted, string(k)+"\x00")
			if next.OK != (ni < len(sorted)) || (next.OK && (string(next.Key) != sorted[ni] || string(next.Val) != m[sorted[ni]])) {
				t.Fatalf("op %d Around(%x) after: %x %v", op, k, next.Key, next.OK)
			}
		default:
			// Ascend a few entries from k, and Seek.
			ks := sorted
			i := sort.SearchStrings(ks, string(k))
			n := 0
			err := h.tr.Ascend(k, func(gk, gv []byte) bool {
				if i+n >= len(ks) || string(gk) != ks[i+n] || string(gv) != m[ks[i+n]] {
					t.Fatalf("op %d Ascend entry %d wrong", op, n)
				}
				n++
				return n < 20
			})
			if err != nil {
				t.Fatal(err)
			}
			if n != min(20, len(ks)-i) {
				t.Fatalf("op %d Ascend saw %d", op, n)
			}
			gk, _, ok, err := h.tr.Seek(k)
			if err != nil || ok != (i < len(ks)) || (ok && string(gk) != ks[i]) {
				t.Fatalf("op %d Seek: %v %v", op, ok, err)
			}
		}
		if op%997 == 0 {
			h.checkLive()
		}
		// A checkpoint in flight while operations go on: they must read
		// the snapshotted nodes from memory (the device lacks them).
		if inflight != nil && (r.IntN(50) == 0 || op == ops-1) {
			h.finish(inflight)
			inflight = nil
		}
		if inflight == nil && r.IntN(700) == 0 {
			inflight = h.snapshot()
		}
		if r.IntN(700) == 0 || op == ops-1 {
			if inflight != nil {
				h.finish(inflight)
				inflight = nil
			}
			h.checkpoint()
			// A fresh tree on the durable root with an empty cache: persistence.
			fresh, err := Open(h.p, nil, h.cfg, h.durable)
			if err != nil {
				t.Fatal(err)
			}
			if errs := fresh.Check(nil); len(errs) > 0 {
				t.Fatalf("Check of durable tree: %v", errors.Join(errs...))
			}
			compare(t, fresh, m)
		}
	}
	compare(t, h.tr, m)
	h.checkLive()
	t.Logf("%d entries, root %d, pager allocs %d", len(m), h.tr.Root(), h.p.allocs)
}

// TestShrinkToEmpty deletes everything: the root must collapse to 0 and
// every block be freed.
func TestShrinkToEmpty(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	r := rand.New(rand.NewPCG(9, 9))
	var keys [][]byte
	for i := range 20000 {
		k := fmt.Appendf(nil, "key-%08d", i)
		keys = append(keys, k)
		if err := h.tr.Put(k, randVal(r, 200)); err != nil {
			t.Fatal(err)
		}
		if i%5000 == 0 {
			h.checkpoint()
		}
	}
	h.checkpoint()
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for i, k := range keys {
		if ok, err := h.tr.Delete(k); !ok || err != nil {
			t.Fatalf("Delete %q: %v %v", k, ok, err)
		}
		if i%3000 == 0 {
			h.checkLive()
			h.checkpoint()
		}
	}
	if h.tr.Root() != 0 {
		t.Fatalf("root %d after deleting everything", h.tr.Root())
	}
	h.checkpoint()
	if n := len(h.p.liveSet()); n != 0 {
		t.Fatalf("%d blocks still allocated", n)
	}
}

// TestFill checks nodes stay reasonably full after random deletes (merges
// work): the number of leaves is bounded by the bytes stored.
func TestFill(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	r := rand.New(rand.NewPCG(5, 5))
	m := model{}
	for range 30000 {
		k := fmt.Appendf(nil, "%016x", r.Uint64())
		m[string(k)] = "0123456789abcdef"
		if err := h.tr.Put(k, []byte("0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
	}
	ks := m.sortedKeys()
	for i, k := range ks {
		if i%10 != 0 {
			if _, err := h.tr.Delete([]byte(k)); err != nil {
				t.Fatal(err)
			}
			delete(m, k)
		}
	}
	compare(t, h.tr, m)
	leaves := 0
	h.tr.Check(func(_ uint64, level int) {
		if level == 0 {
			leaves++
		}
	})
	bytesStored := len(m) * (4 + 16 + 16)
	// Underfull means < 1/4 full, and merging keeps neighbours from both
	// being underfull: on average at least ~1/4 full.
	if limit := 4*bytesStored/(4096-hdrSize) + 2; leaves > limit {
		t.Fatalf("%d leaves for %d bytes (limit %d)", leaves, bytesStored, limit)
	}
	h.checkLive()
}

func TestUpdateTx(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	// Free-space style: key = start block (big endian), value = length.
	put := func(tx *Tx, start, n uint64) error {
		k := binary.BigEndian.AppendUint64(nil, start)
		return tx.Put(k, binary.BigEndian.AppendUint64(nil, n))
	}
	err := h.tr.Update(func(tx *Tx) error {
		for i := range uint64(1000) {
			if err := put(tx, i*10, 5); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Which extent contains block 4327? SeekLE(4327) -> 4320.
	var saved *Tx
	err = h.tr.Update(func(tx *Tx) error {
		saved = tx
		k, v, ok, err := tx.SeekLE(binary.BigEndian.AppendUint64(nil, 4327))
		if err != nil || !ok || binary.BigEndian.Uint64(k) != 4320 || binary.BigEndian.Uint64(v) != 5 {
			return fmt.Errorf("SeekLE: %x %x %v %v", k, v, ok, err)
		}
		// Merge 4320+5 with 4330+5 into 4320+15.
		if ok, err := tx.Delete(binary.BigEndian.AppendUint64(nil, 4330)); !ok || err != nil {
			return fmt.Errorf("delete: %v %v", ok, err)
		}
		if err := put(tx, 4320, 15); err != nil {
			return err
		}
		k, _, ok, err = tx.Seek(binary.BigEndian.AppendUint64(nil, 4321))
		if err != nil || !ok || binary.BigEndian.Uint64(k) != 4340 {
			return fmt.Errorf("Seek: %x %v %v", k, ok, err)
		}
		n := 0
		if err := tx.Ascend(nil, func(_, _ []byte) bool { n++; return true }); err != nil || n != 999 {
			return fmt.Errorf("Ascend: %d %v", n, err)
		}
		v, ok, err = tx.Get(binary.BigEndian.AppendUint64(nil, 4320))
		if err != nil || !ok || binary.BigEndian.Uint64(v) != 15 {
			return fmt.Errorf("Get: %v %v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := saved.Get(nil); !errors.Is(err, ErrTxDone) {
		t.Fatalf("Tx after Update: %v", err)
	}
	sentinel := errors.New("stop")
	if err := h.tr.Update(func(*Tx) error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Update error: %v", err)
	}
	h.checkLive()
}

func TestEntryLimits(t *testing.T) {
	if MaxEntry(4096) < 900 {
		t.Fatalf("MaxEntry(4096) = %d", MaxEntry(4096))
	}
	for _, ns := range []int{4096, 8192, 65536} {
		// Four maximal entries of either kind fit one node.
		if 4*(innerEntryHdr+MaxEntry(ns)) > ns-hdrSize {
			t.Fatalf("ns %d: four entries do not fit", ns)
		}
	}
	h := newHarness(t, 4096, 1<<20)
	max := MaxEntry(4096)
	if err := h.tr.Put(make([]byte, 10), make([]byte, max-10)); err != nil {
		t.Fatalf("max entry: %v", err)
	}
	if err := h.tr.Put(make([]byte, 10), make([]byte, max-9)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized entry: %v", err)
	}
	if _, err := Open(h.p, h.c, testCfg(3000), 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad node size: %v", err)
	}
	// Large entries only: every node holds few, splits are tight.
	for i := range 500 {
		k := fmt.Appendf(nil, "%0300d", i*7919%500)
		if err := h.tr.Put(k, bytes.Repeat([]byte{byte(i)}, max-len(k)-i%3)); err != nil {
			t.Fatal(err)
		}
	}
	h.checkLive()
	h.checkpoint()
}

// TestConcurrentReaders runs readers against a writer under -race.
func TestConcurrentReaders(t *testing.T) {
	h := newHarness(t, 4096, 64<<10) // small cache: readers load from the device
	for i := range 5000 {
		if err := h.tr.Put(fmt.Appendf(nil, "k%06d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	h.checkpoint()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 4)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Appendf(nil, "k%06d", r.IntN(5000))
				// Even keys are never deleted by the writer.
				i := r.IntN(2500) * 2
				k = fmt.Appendf(k[:0], "k%06d", i)
				if _, ok, err := h.tr.Get(k); err != nil || !ok {
					errc <- fmt.Errorf("Get %s: %v %v", k, ok, err)
					return
				}
				if _, _, ok, err := h.tr.SeekLE(k); err != nil || !ok {
					errc <- fmt.Errorf("SeekLE %s: %v %v", k, ok, err)
					return
				}
				n := 0
				if err := h.tr.Ascend(k, func(_, _ []byte) bool { n++; return n < 50 }); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for round := range 20 {
		for i := 1; i < 5000; i += 2 {
			k := fmt.Appendf(nil, "k%06d", i)
			var err error
			if round%2 == 0 {
				_, err = h.tr.Delete(k)
			} else {
				err = h.tr.Put(k, []byte("w"))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		h.checkpoint()
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	h.checkLive()
}

// TestPutSameValue: rewriting an identical value copies nothing.
func TestPutSameValue(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	for i := range 1000 {
		if err := h.tr.Put(fmt.Appendf(nil, "k%04d", i), []byte("same")); err != nil {
			t.Fatal(err)
		}
	}
	h.checkpoint()
	root := h.tr.Root()
	if err := h.tr.Put([]byte("k0500"), []byte("same")); err != nil {
		t.Fatal(err)
	}
	if h.tr.Dirty() != 0 || h.tr.Root() != root {
		t.Fatalf("identical Put dirtied %d nodes", h.tr.Dirty())
	}
	if err := h.tr.Put([]byte("k0500"), nil); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := h.tr.Get([]byte("k0500")); err != nil || !ok || len(v) != 0 {
		t.Fatalf("empty value: %q %v %v", v, ok, err)
	}
	if h.tr.Dirty() == 0 || h.tr.Root() == root {
		t.Fatal("changed Put did not copy the path")
	}
	h.checkLive()
	h.checkpoint()
}

// TestRekey moves keys up and down by random amounts (as free-space
// records move when their front or back is used) among many entries over
// several levels, checkpointing now and then, and compares with a model:
// the in-place path and the fallback must both keep the order.
func TestRekey(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	m := model{}
	key := func(n uint64) []byte { return binary.BigEndian.AppendUint64([]byte("f"), n) }
	rng := rand.New(rand.NewPCG(3, 4))
	nums := map[uint64]bool{}
	for len(nums) < 3000 {
		n := rng.Uint64N(1 << 20)
		nums[n] = true
		v := fmt.Sprint(n)
		if err := h.tr.Put(key(n), []byte(v)); err != nil {
			t.Fatal(err)
		}
		m[string(key(n))] = v
	}
	for step := range 20000 {
		// Pick an existing key and a new one near it (often past its
		// neighbours, so some moves cannot stay in place).
		var old uint64
		for n := range nums {
			old = n
			break
		}
		d := rng.Uint64N(64)
		nw := old + d
		if rng.IntN(2) == 0 && old >= d {
			nw = old - d
		}
		if nums[nw] && nw != old {
			continue
		}
		v := fmt.Sprint(nw, step)
		err := h.tr.Update(func(tx *Tx) error { return tx.Rekey(key(old), key(nw), []byte(v)) })
		if err != nil {
			t.Fatalf("rekey %d -> %d: %v", old, nw, err)
		}
		delete(nums, old)
		delete(m, string(key(old)))
		nums[nw] = true
		m[string(key(nw))] = v
		if step%2000 == 0 {
			h.checkLive()
			h.checkpoint()
			compare(t, h.tr, m)
		}
	}
	h.checkLive()
	compare(t, h.tr, m)
	if err := h.tr.Update(func(tx *Tx) error { return tx.Rekey(key(1<<30), key(1<<31), nil) }); err == nil {
		t.Fatal("rekey of a missing key succeeded")
	}
}

// TestAscendLE checks AscendLE against the model for probe keys before,
// between, on and after the entries, over several levels.
func TestAscendLE(t *testing.T) {
	h := newHarness(t, 4096, 1<<20)
	m := model{}
	key := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	if err := h.tr.AscendLE(key(5), func(k, v []byte) bool { t.Fatal("entry in an empty tree"); return false }); err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 4000; i++ {
		n := 10 + i*10
		if err := h.tr.Put(key(n), key(i)); err != nil {
			t.Fatal(err)
		}
		m[string(key(n))] = string(key(i))
	}
	h.checkpoint()
	ks := m.sortedKeys()
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		probe := key(rng.Uint64N(40100))
		// Want: the last key <= probe (or the first key), then the next two.
		start := sort.SearchStrings(ks, string(probe)+"\x00") - 1
		start = max(start, 0)
		var got []string
		err := h.tr.AscendLE(probe, func(k, v []byte) bool {
			got = append(got, string(k))
			return len(got) < 3
		})
		if err != nil {
			t.Fatal(err)
		}
		want := ks[start:min(start+3, len(ks))]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("AscendLE(%x): got %x, want %x", probe, got, want)
		}
	}
}

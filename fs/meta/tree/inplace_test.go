package tree

import (
	"encoding/binary"
	"errors"
	"maps"
	"math/rand/v2"
	"testing"
)

// TestInPlaceRewrites replaces values and rekeys entries with ones of the
// same sizes (rewritten in place when the dirty leaf owns them) among
// inserts, deletes and splits, with a checkpoint frozen while changes go
// on: the frozen checkpoint must hold exactly the entries of its moment
// (an in-place rewrite never reaches a node it shares bytes with), and
// the live tree must match the model with valid separators throughout.
func TestInPlaceRewrites(t *testing.T) {
	p := newMemPager(4096)
	cfg := testCfg(4096)
	tr, err := Open(p, nil, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	m := model{}
	key := func(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("k"), i) }
	val := func() []byte { return binary.LittleEndian.AppendUint64(nil, r.Uint64()) }
	pick := func() []byte {
		for k := range m {
			return []byte(k)
		}
		return nil
	}
	var frozen *Frozen
	var frozenRoot uint64
	var atFreeze model
	for step := range 20000 {
		switch op := r.IntN(10); {
		case op < 3 || len(m) == 0:
			k, v := key(r.Uint64N(1<<20)), val()
			if err := tr.Put(k, v); err != nil {
				t.Fatal(err)
			}
			m[string(k)] = string(v)
		case op < 6:
			k, v := pick(), val()
			if err := tr.Put(k, v); err != nil {
				t.Fatal(err)
			}
			m[string(k)] = string(v)
		case op < 8:
			// A free-space record's start moving up: the next key.
			k := pick()
			nk := key(binary.BigEndian.Uint64(k[1:]) + 1)
			if _, ok := m[string(nk)]; ok {
				continue
			}
			v := val()
			if err := tr.Update(func(tx *Tx) error { return tx.Rekey(k, nk, v) }); err != nil {
				t.Fatal(err)
			}
			delete(m, string(k))
			m[string(nk)] = string(v)
		default:
			k := pick()
			if _, err := tr.Delete(k); err != nil {
				t.Fatal(err)
			}
			delete(m, string(k))
		}
		if step%1000 == 999 {
			if errs := tr.Check(nil); len(errs) > 0 {
				t.Fatalf("step %d: %v", step, errors.Join(errs...))
			}
			compare(t, tr, m)
			if frozen != nil {
				for _, w := range frozen.Encode() {
					p.dev[w.Blk] = w.Data
				}
				tr.Written()
				durable, err := Open(p, nil, cfg, frozenRoot)
				if err != nil {
					t.Fatal(err)
				}
				compare(t, durable, atFreeze)
			}
			frozenRoot, frozen = tr.Freeze()
			atFreeze = maps.Clone(m)
		}
	}
}

// TestInPlaceNoAllocs: replacing an owned entry by one of the same sizes
// allocates nothing.
func TestInPlaceNoAllocs(t *testing.T) {
	tr, err := Open(newMemPager(4096), nil, testCfg(4096), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if err := tr.Put([]byte{byte(i >> 8), byte(i)}, []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	k, v := []byte{1, 0}, []byte("vaxue")
	if n := testing.AllocsPerRun(100, func() {
		v[2]++
		if err := tr.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Put over an owned entry: %v allocations", n)
	}
	// As the free-space records are moved: the old key is the tree's own
	// (LastLE), the new one a caller's.
	i := byte(0)
	if n := testing.AllocsPerRun(100, func() {
		err := tr.Update(func(tx *Tx) error {
			old, _, ok, err := tx.LastLE([]byte{1, 0, i})
			if err != nil || !ok {
				return errors.Join(err, errors.New("no entry"))
			}
			i++
			return tx.Rekey(old, []byte{1, 0, i}, v)
		})
		if err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Rekey of an owned entry: %v allocations", n)
	}
}

package ftl

import (
	"math/rand/v2"
	"testing"
)

// hotColdRolling replays the shape of waf.sh's fio run straight into the
// model: a hot region (10% of the drive) overwritten at random in 16 KiB
// blocks, static cold data (15%) and rolling cold files (68%, 14 files)
// that are trimmed and rewritten whole, picked at random, making up share
// r of the host writes. separate puts hot, static and rolling data on
// handles 0, 1, 2; otherwise all on handle 0. It returns the WAF of the
// last quarter of `times` drive capacities written after the fill.
func hotColdRolling(t *testing.T, spec string, logical int64, r, times float64, separate bool) float64 {
	t.Helper()
	m := mustModel(t, spec, logical)
	const mb = 1 << 20
	hot := logical / 10 / mb * mb
	static := logical * 15 / 100 / mb * mb
	const nroll = 14
	roll := logical * 68 / 100 / nroll / mb * mb
	hh, hs, hr := 0, 0, 0
	if separate {
		hh, hs, hr = 0, 1, 2
	}
	write := func(off, n int64, h int) {
		if err := m.Write(off, n, h); err != nil {
			t.Fatal(err)
		}
	}
	staticOff, rollOff := hot, hot+static
	for o := staticOff; o < rollOff; o += mb {
		write(o, mb, hs)
	}
	for o := rollOff; o < rollOff+nroll*roll; o += mb {
		write(o, mb, hr)
	}
	for o := int64(0); o < hot; o += mb {
		write(o, mb, hh)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	c0 := m.Counters()
	target := uint64(times * float64(logical))
	var c3 Counters
	cur, pos := -1, int64(0)
	for host := uint64(0); host < target; host = m.Counters().Host - c0.Host {
		if host < target*3/4 {
			c3 = m.Counters()
		}
		if rng.Float64() < r {
			if cur < 0 {
				cur, pos = rng.IntN(nroll), 0
				m.Discard(rollOff+int64(cur)*roll, roll)
			}
			write(rollOff+int64(cur)*roll+pos, mb, hr)
			if pos += mb; pos == roll {
				cur = -1
			}
			continue
		}
		for n := int64(0); n < mb; n += 16 << 10 {
			write(rng.Int64N(hot/(16<<10))*(16<<10), 16<<10, hh)
		}
	}
	checkInvariants(t, m)
	c1 := m.Counters()
	return WAF(c1.Host-c3.Host, c1.Media-c3.Media)
}

// Hot random overwrites beside long-lived cold files that die whole: on
// their own handles the cold data is never copied and the hot region gets
// all the spare space; on one handle every unit mixes both, and GC copies
// the cold files' pages. This is the fio run of waf.sh, at a quarter of its
// size, without the filesystem.
func TestHotColdRollingStreamsHelp(t *testing.T) {
	const spec = "op=7,ru=2M,handles=4"
	mixed := hotColdRolling(t, spec, 512<<20, 0.4, 6, false)
	separated := hotColdRolling(t, spec, 512<<20, 0.4, 6, true)
	t.Logf("steady WAF: one handle %.3f, separated %.3f, ratio %.2f", mixed, separated, separated/mixed)
	if separated > 1.3 {
		t.Errorf("separated WAF %.3f: hot data at its effective spare should stay near 1.1-1.2", separated)
	}
	if separated/mixed > 0.8 {
		t.Errorf("separated/mixed WAF %.3f/%.3f = %.2f: separation should cut WAF by more than 20%%", separated, mixed, separated/mixed)
	}
}

package crashtest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/meta"
)

// randomSteps generates n operations valid on st, each followed by a
// persistence step with some probability. It simulates them on a copy of
// the model (with stand-in inode numbers: validity does not depend on
// them).
func randomSteps(rng *rand.Rand, st *state, n int, persistP float64) []op {
	st = st.clone()
	fake := uint64(1 << 60)
	seq := 0
	name := func(prefix string) string { seq++; return fmt.Sprintf("%s%d", prefix, seq) }
	var steps []op
	for len(steps) < n {
		var dirs, files []string
		dirs = append(dirs, "")
		for _, p := range slices.Sorted(maps.Keys(st.ns)) {
			if st.inodes[st.ns[p]].dir {
				dirs = append(dirs, p)
			} else {
				files = append(files, p)
			}
		}
		join := func(d, n string) string {
			if d == "" {
				return n
			}
			return d + "/" + n
		}
		pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
		anyPath := func() string {
			if len(files) > 0 && rng.IntN(4) != 0 {
				return pick(files)
			}
			return pick(dirs)
		}
		var o op
		k := rng.IntN(100)
		if len(files) == 0 && k >= 14 {
			k = 0
		}
		switch {
		case k < 10 || len(files) < 3 && k < 20:
			o = op{kind: opCreate, path: join(pick(dirs), name("f"))}
		case k < 14:
			o = op{kind: opMkdir, path: join(pick(dirs), name("d"))}
		case k < 44:
			f := pick(files)
			size := st.size(f)
			o = op{kind: opWrite, path: f, n: 1 + rng.Int64N(40<<10)}
			switch rng.IntN(4) {
			case 0:
				o.rel = true // append
			case 1:
				o.rel, o.off = true, rng.Int64N(3*4096) // past EOF
			default:
				o.off = rng.Int64N(size + 1) // overwrite (and maybe extend)
			}
			if !o.rel && o.off+o.n > 512<<10 || o.rel && size+o.off+o.n > 512<<10 {
				o.rel, o.off = false, rng.Int64N(64<<10)
			}
		case k < 52:
			f := pick(files)
			modes := []uint32{0, meta.FallocKeepSize, meta.FallocPunchHole | meta.FallocKeepSize,
				meta.FallocZeroRange, meta.FallocZeroRange | meta.FallocKeepSize}
			o = op{kind: opFalloc, path: f, off: rng.Int64N(st.size(f) + 8192), n: 1 + rng.Int64N(32<<10), mode: modes[rng.IntN(len(modes))]}
		case k < 58:
			f := pick(files)
			o = op{kind: opTrunc, path: f, off: rng.Int64N(st.size(f) + 1)}
			if rng.IntN(3) == 0 {
				o.rel, o.off = true, rng.Int64N(20000)
			}
		case k < 63:
			o = op{kind: opLink, path: pick(files), path2: join(pick(dirs), name("l"))}
		case k < 70:
			o = op{kind: opUnlink, path: pick(files)}
		case k < 80:
			src := anyPath()
			dst := join(pick(dirs), name("r"))
			if rng.IntN(3) == 0 {
				dst = anyPath() // replace what is there, if the types allow
			}
			o = op{kind: opRename, path: src, path2: dst}
		case k < 83:
			o = op{kind: opRmdir, path: pick(dirs)}
		case k < 92:
			o = op{kind: opSetxattr, path: anyPath(), name: fmt.Sprintf("user.k%d", rng.IntN(3)), val: fmt.Sprint(rng.IntN(1000))}
		default:
			o = op{kind: opSetstream, path: anyPath(), stream: uint32(rng.IntN(3))}
		}
		if !o.valid(st) {
			continue
		}
		fake++
		o.applyModel(st, fake, 1)
		steps = append(steps, o)
		if rng.Float64() >= persistP {
			continue
		}
		target := o.path
		if o.kind == opLink || o.kind == opRename {
			target = o.path2
		}
		var p op
		switch r := rng.IntN(10); {
		case r < 4:
			p = op{kind: opFsync, path: target}
		case r < 6:
			p = op{kind: opFdatasync, path: target}
		case r < 8:
			p = op{kind: opFsync, path: parent(target)}
		default:
			p = op{kind: opSync}
		}
		if p.valid(st) {
			steps = append(steps, p)
		}
	}
	return steps
}

func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestCrashRandom runs rounds of a seeded random workload; every crash
// state of each round is checked (the torn and reordered ones sampled, see
// below), and the next round starts from one of them after its recovery,
// so crashes after recoveries (a torn commit followed by new ones) are
// covered too. STREAMFS_CRASH_SEED replays a run, STREAMFS_CRASH_ROUNDS
// and STREAMFS_CRASH_STEPS size it.
func TestCrashRandom(t *testing.T) {
	runCrashRandom(t, "TestCrashRandom", newEnv)
}

// TestCrashRandomZoned is TestCrashRandom on an emulated zoned device
// (zonedGeo), the recording holding the device's own state saves too:
// out-of-place writes, their commits and the zones' write pointers
// crash together. Zones are finished at every mount, so the rounds fill
// the sequential zones and reclaim runs in the longer runs.
func TestCrashRandomZoned(t *testing.T) {
	runCrashRandom(t, "TestCrashRandomZoned", newZonedEnv)
}

// runCrashRandom runs TestCrashRandom (name) on the image newEnv makes.
func runCrashRandom(t *testing.T, name string, newEnv func(testing.TB, []op) *env) {
	seed := envInt(t, "STREAMFS_CRASH_SEED", time.Now().UnixNano())
	defRounds, defSteps := int64(2), int64(20)
	if testing.Short() {
		defRounds, defSteps = 2, 12
	}
	rounds := int(envInt(t, "STREAMFS_CRASH_ROUNDS", defRounds))
	steps := int(envInt(t, "STREAMFS_CRASH_STEPS", defSteps))
	t.Logf("seed %d (replay: STREAMFS_CRASH_SEED=%d STREAMFS_CRASH_ROUNDS=%d STREAMFS_CRASH_STEPS=%d)", seed, seed, rounds, steps)
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(seed), 0xc4a5))
	e := newEnv(t, []op{{kind: opMkdir, path: "d0"}, {kind: opMkdir, path: "d1"}, {kind: opCreate, path: "d0/f0"}})
	c := newChecker(t, faulty.EnumOptions{MaxTears: 3, AllSubsets: 3, Subsets: 4, Seed: uint64(seed)})
	c.recoveryEvery, c.recoveryMax = 20, 6
	if full() {
		c.recoveryEvery, c.recoveryMax = 7, 0
	}
	c.repro = func(w workload) string {
		return fmt.Sprintf("STREAMFS_CRASH_SEED=%d STREAMFS_CRASH_ROUNDS=%d STREAMFS_CRASH_STEPS=%d go test -run '^%s$' ./fs/crashtest/", seed, rounds, steps, name)
	}
	for round := range rounds {
		// Every other round syncs after most operations, so its journal
		// fills past half and a checkpoint runs inside the recording.
		persistP := 0.3
		if round%2 == 1 {
			persistP = 0.9
		}
		w := workload{id: fmt.Sprintf("seed %d round %d", seed, round), steps: randomSteps(rng, e.st, steps, persistP)}
		if e.zoned {
			noPrealloc(w.steps)
		}
		if !c.workload(e, w) {
			break
		}
		next, err := nextBase(rng, e, w)
		if err != nil {
			t.Fatalf("round %d: continuing from a crash state: %v", round, err)
		}
		e = next
	}
	c.report("random", time.Since(start))
}

// nextBase picks one crash state of w's run (a torn one half the time)
// as the next round's starting point.
func nextBase(rng *rand.Rand, e *env, w workload) (*env, error) {
	res, err := e.run(w)
	if err != nil {
		return nil, err
	}
	states := faulty.CrashStates(res.ops, faulty.EnumOptions{TearUnit: sector, MaxTears: 3, Seed: rng.Uint64()})
	var torn []faulty.CrashState
	for _, cs := range states {
		if cs.Variant == "torn" {
			torn = append(torn, cs)
		}
	}
	cs := states[rng.IntN(len(states))]
	if len(torn) > 0 && rng.IntN(2) == 0 {
		cs = torn[rng.IntN(len(torn))]
	}
	img, err := faulty.NewReplayer(e.img, res.ops, sector).Image(cs)
	if err != nil {
		return nil, err
	}
	// The next round mounts the crash image itself: its recording starts
	// with the recovery, and its operations run on a store that recovered
	// rather than one that was unmounted cleanly (new commits after a torn
	// one). The model state is what a trial recovery of a copy finds.
	s, err := openStore(img.Clone())
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", cs, err)
	}
	got, err := readState(s)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("read %s: %w", cs, err)
	}
	if err := s.Close(); err != nil {
		return nil, fmt.Errorf("unmount %s: %w", cs, err)
	}
	return &env{img: img, st: got.state, zoned: e.zoned}, nil
}

// noPrealloc turns fallocate's preallocation, which zones refuse
// (EOPNOTSUPP), into zeroing the range: the same sizes, written zeros.
func noPrealloc(steps []op) {
	for i, o := range steps {
		if o.kind == opFalloc && o.mode&(meta.FallocPunchHole|meta.FallocZeroRange) == 0 {
			steps[i].mode |= meta.FallocZeroRange
		}
	}
}

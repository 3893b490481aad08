package crashtest

// The checker: run a workload once over a recording device, then build
// every crash state of the recording and check each one.
//
// What each call promises, and so what the oracle demands after a crash
// (README, "On-disk format and durability"; the Fsync doc comment):
//   - every namespace operation (create, mkdir, link, unlink, rename,
//     rmdir, truncate, setxattr, setstream) journals its records at once
//     and commits are replayed in order, all or nothing: the names, xattrs
//     and streams found after a crash are exactly those after one of the
//     operations between the last acknowledged fsync/fdatasync/sync and
//     the cut (an earlier state loses an acknowledged change; any other
//     state is one the filesystem was never in);
//   - fsync and fdatasync of anything commit the whole journal ("fsync
//     commits the whole journal, so a file's name and new parent
//     directories become durable with it"; fdatasync reaches the store as
//     the same call and the README promises it "commits as before"), so
//     they acknowledge the whole namespace, like sync. This is stronger
//     than POSIX, which promises a new file's name only after an fsync of
//     its directory; ext4 and XFS behave the same way;
//   - fsync and fdatasync of a file acknowledge its data and size, sync
//     those of every file. Data writes go to the device at once and a
//     write's new size is journaled lazily (at the next fsync of the file
//     or sync), so a file's size after a crash is one of its sizes from
//     its last acknowledged version to the commit point the namespace
//     matched, and every byte is that byte of one of its versions from the
//     acknowledged one on (an unacknowledged overwrite in place may land
//     in part) — a file untouched since its acknowledgement must match it
//     exactly;
//   - no byte of another file (or of another offset) ever shows (durability
//     rule 1): every written byte carries its inode and offset;
//   - link counts match the names; fsck -n finds no problem in the crash
//     image (replaying the journal in memory), the image mounts, and fsck
//     -n finds none after the recovery mount's unmount either.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/backend/zoned"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

const (
	imageSize = 32 << 20 // the smallest streamfs: two AGs of 16 MiB, a 2 MiB journal
	sector    = 512      // tear unit: the device's atomic write
)

// storeOpts: no periodic commit (the workload's own fsyncs and syncs are
// the only commits, so a recording is reproducible), and a small node
// cache, which costs less to set up and tear down at every mount.
func storeOpts() meta.Options {
	return meta.Options{CommitInterval: time.Hour, CacheBytes: 4 << 20}
}

// env is a formatted image with a tree on it: the state every workload of
// a test starts from.
type env struct {
	img   *faulty.Mem
	st    *state
	zoned bool // img is an emulated zoned device's image
}

// newEnv formats an image and runs setup on it (model and store alike),
// then unmounts cleanly.
func newEnv(t testing.TB, setup []op) *env {
	t.Helper()
	mem, err := faulty.NewMem(imageSize, sector)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, mem, mem, setup)
}

// zonedGeo is the zoned image of the zoned crash tests: 32 conventional
// zones of 1 MiB (mkfs's minimum of metadata space), then 8 sequential
// ones of which 768 KiB is writable.
var zonedGeo = zoned.Geometry{ZoneSize: 1 << 20, ZoneCap: 768 << 10, Conv: 32, MaxOpen: 12, MaxActive: 12, Sector: sector}

// newZonedEnv is newEnv on an emulated zoned device.
func newZonedEnv(t testing.TB, setup []op) *env {
	t.Helper()
	mem, err := faulty.NewMem(int64(zonedGeo.Conv+8)*zonedGeo.ZoneSize+1<<20, sector)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zoned.Format(mem, zonedGeo); err != nil {
		t.Fatal(err)
	}
	dev, err := view(mem, false)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, mem, dev, setup)
	e.zoned = true
	return e
}

// keepOpen is a device whose Close leaves the media open: a zoned device
// loaded over an image must not close it (the image is cloned and mounted
// again).
type keepOpen struct{ backend.Device }

func (keepOpen) Close() error { return nil }

// view returns the device the filesystem sees on m: m itself, or the
// zoned device a zoned image holds (its label is in the last block).
func view(m backend.Device, ro bool) (backend.Device, error) {
	d, ok, err := zoned.Load(keepOpen{m}, ro)
	if err != nil {
		return nil, err
	}
	if !ok {
		return m, nil
	}
	return d, nil
}

// openStore mounts the filesystem on m (through view).
func openStore(m backend.Device) (*meta.Store, error) {
	d, err := view(m, false)
	if err != nil {
		return nil, err
	}
	return meta.Open(d, storeOpts())
}

// fsckImage runs fsck -n on the filesystem on m (through view).
func fsckImage(m backend.Device) (*fsck.Report, error) {
	d, err := view(m, true)
	if err != nil {
		return nil, err
	}
	return meta.Fsck(d, fsck.Options{})
}

// newEnvOn formats dev (whose media is mem) and runs setup on it.
func newEnvOn(t testing.TB, mem *faulty.Mem, dev backend.Device, setup []op) *env {
	t.Helper()
	if _, err := meta.Mkfs(dev, format.MkfsParams{AGCount: 2}); err != nil {
		t.Fatal(err)
	}
	s, err := meta.Open(dev, storeOpts())
	if err != nil {
		t.Fatal(err)
	}
	r := &storeRun{s: s, pins: map[uint64]*meta.Inode{}}
	st := newState()
	for i, o := range setup {
		gen := byte(i + 1)
		ino, err := r.apply(o, st, gen)
		if err != nil {
			t.Fatalf("setup %v: %v", o, err)
		}
		o.applyModel(st, ino, gen)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	e := &env{img: mem, st: st}
	s, err = openStore(mem.Clone())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := readState(s)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMeta(got.state, st) {
		t.Fatalf("setup: store and model differ: %s", metaDiff(got.state, st))
	}
	return e
}

// workload is a sequence of steps; id reproduces it.
type workload struct {
	id    string
	steps []op
}

func (w workload) String() string {
	var parts []string
	for _, o := range w.steps {
		parts = append(parts, o.String())
	}
	return strings.Join(parts, "; ")
}

// ack is what a persistence step acknowledged.
type ack struct {
	ok  bool   // the step was a persistence step and succeeded
	all bool   // every file's data (sync)
	ino uint64 // the file whose data (fsync, fdatasync)
}

// recording is one run of a workload: its device log and the model's
// state before each step (states[k]) and after the last.
type recording struct {
	w      workload
	ops    []faulty.RecOp
	states []*state
	acks   []ack
}

// run executes w on a copy of e's image through a Recorder. Marks 2k and
// 2k+1 bracket step k in the log.
func (e *env) run(w workload) (*recording, error) {
	rec := faulty.NewRecorder(e.img.Clone())
	s, err := openStore(rec)
	if err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	defer s.Close()
	r := &storeRun{s: s, pins: map[uint64]*meta.Inode{}}
	res := &recording{w: w, states: []*state{e.st}, acks: make([]ack, len(w.steps))}
	st := e.st
	for k, o := range w.steps {
		gen := byte(k%100 + 10)
		if !o.valid(st) {
			return nil, fmt.Errorf("step %d (%v) is not valid here", k, o)
		}
		rec.Mark(2 * k)
		ino, err := r.apply(o, st, gen)
		rec.Mark(2*k + 1)
		if err != nil {
			return nil, fmt.Errorf("step %d (%v): %w", k, o, err)
		}
		next := st.clone()
		o.applyModel(next, ino, gen)
		if o.persist() {
			a := ack{ok: true, all: o.kind == opSync}
			if fino, in := st.lookup(o.path); in != nil && !in.dir {
				a.ino = fino
			}
			res.acks[k] = a
		}
		res.states = append(res.states, next)
		st = next
	}
	rec.Stop()
	res.ops = rec.Ops()
	// The model must describe the running store exactly (it checks the
	// model as much as the store).
	got, err := readState(s)
	if err != nil {
		return nil, fmt.Errorf("reading the running store: %w", err)
	}
	if !sameMeta(got.state, st) {
		return nil, fmt.Errorf("running store and model differ: %s", metaDiff(got.state, st))
	}
	for p, ino := range st.ns {
		if want := st.inodes[ino]; !want.dir && firstDiff(got.inodes[ino].data, want.data) >= 0 {
			return nil, fmt.Errorf("running store and model differ: %s at byte %d", p, firstDiff(got.inodes[ino].data, want.data))
		}
	}
	return res, nil
}

// window is the oracle of one crash point: the model states the
// recovered metadata may match (states[lo..hi]) and, per inode, the first
// state whose data must survive.
type window struct {
	lo, hi   int
	finished int // steps that had returned
	dataLo   func(ino uint64) int
}

// windowAt derives the oracle from the marks among the first at ops.
func (res *recording) windowAt(at int) window {
	started, finished := 0, 0
	for _, o := range res.ops[:at] {
		if o.Kind != faulty.RecMark {
			continue
		}
		if o.Mark%2 == 0 {
			started = o.Mark/2 + 1
		} else {
			finished = o.Mark/2 + 1
		}
	}
	w := window{hi: started, finished: finished}
	for k := range finished {
		if res.acks[k].ok {
			w.lo = k + 1
		}
	}
	w.dataLo = func(ino uint64) int {
		lo := 0
		for k := range finished {
			if a := res.acks[k]; a.ok && (a.all || a.ino == ino) {
				lo = k + 1
			}
		}
		return lo
	}
	return w
}

// verify checks a recovered store's contents against the window. It
// returns a failure class and a description, or "" when all is well.
func (res *recording) verify(got *recovered, w window) (class, detail string) {
	pmax := -1
	for j := w.lo; j <= w.hi; j++ {
		if sameMeta(got.state, res.states[j]) {
			pmax = j
		}
	}
	if pmax < 0 {
		return "namespace", fmt.Sprintf("recovered names/xattrs/streams are no state from the acknowledged one (after step %d) to the newest (after step %d)\n    vs acknowledged: %s\n    vs newest: %s",
			w.lo, w.hi, metaDiff(got.state, res.states[w.lo]), metaDiff(got.state, res.states[w.hi]))
	}
	seen := map[uint64]bool{}
	for _, p := range slices.Sorted(maps.Keys(got.ns)) {
		ino := got.ns[p]
		if seen[ino] {
			continue
		}
		seen[ino] = true
		in := got.inodes[ino]
		want := uint32(got.links(ino))
		if in.dir {
			want = 2
			for _, c := range got.children(p) {
				if got.inodes[got.ns[c]].dir {
					want++
				}
			}
		}
		if got.nlink[ino] != want {
			return "nlink", fmt.Sprintf("%s (inode %d): link count %d, %d expected from the names", p, ino, got.nlink[ino], want)
		}
		if in.dir {
			continue
		}
		if c, d := res.checkData(p, ino, in.data, w, pmax); c != "" {
			return c, d
		}
	}
	return "", ""
}

// checkData applies the data rule to one file.
func (res *recording) checkData(p string, ino uint64, data []byte, w window, pmax int) (class, detail string) {
	lo := w.dataLo(ino)
	for lo < pmax && res.states[lo].inodes[ino] == nil {
		lo++ // created after its last acknowledgement
	}
	var versions [][]byte
	for j := lo; j <= w.hi; j++ {
		if v := res.states[j].inodes[ino]; v != nil {
			versions = append(versions, v.data)
		}
	}
	if len(versions) == 0 {
		return "model", fmt.Sprintf("%s (inode %d) is in no model state", p, ino)
	}
	var sizes []int
	sizeOK := false
	for j := lo; j <= max(lo, pmax); j++ {
		if v := res.states[j].inodes[ino]; v != nil {
			sizes = append(sizes, len(v.data))
			sizeOK = sizeOK || len(v.data) == len(data)
		}
	}
	if !sizeOK {
		return "size", fmt.Sprintf("%s (inode %d): size %d, allowed %v (acknowledged after step %d, metadata matched after step %d)",
			p, ino, len(data), slices.Compact(slices.Sorted(slices.Values(sizes))), lo, pmax)
	}
	for _, v := range versions {
		if firstDiff(v, data) < 0 {
			return "", ""
		}
	}
	for i, b := range data {
		ok := false
		for _, v := range versions {
			if byteAt(v, i) == b {
				ok = true
				break
			}
		}
		if ok {
			continue
		}
		class := "data"
		if !datatag.OK(ino, int64(i), b) {
			class = "stale"
		}
		return class, fmt.Sprintf("%s (inode %d): byte %d is %#x, in none of its %d versions from the acknowledged one (after step %d: %#x) to the newest (%#x)",
			p, ino, i, b, len(versions), lo, byteAt(versions[0], i), byteAt(versions[len(versions)-1], i))
	}
	return "", ""
}

// checker checks crash states and keeps the counts.
type checker struct {
	t    testing.TB
	enum faulty.EnumOptions
	// recoveryEvery: every so many distinct states, the recovery mount is
	// recorded too and its own crash states checked (a crash while
	// recovering).
	recoveryEvery int
	recoveryMax   int // crash states checked per recorded recovery; 0: all
	// fsckEvery: fsck -n runs on every so many crash images before their
	// recovery (1: all; it costs as much as the mount). After recovery it
	// runs on all of them.
	fsckEvery      int
	images, fscked int

	workloads, states, distinct, recoveryStates int
	variants                                    map[string]int
	fails                                       map[string]int
	failedWorkloads                             int
	examples                                    map[string][]string
	repro                                       func(w workload) string
}

func newChecker(t testing.TB, enum faulty.EnumOptions) *checker {
	c := &checker{t: t, enum: enum, fsckEvery: 2, variants: map[string]int{}, fails: map[string]int{}, examples: map[string][]string{}}
	if full() {
		c.fsckEvery = 1
	}
	return c
}

// failure notes one failed crash state.
func (c *checker) failure(w workload, state, class, detail string) {
	c.fails[class]++
	if len(c.examples[class]) < 3 {
		repro := ""
		if c.repro != nil {
			repro = "\n  reproduce: " + c.repro(w)
		}
		c.examples[class] = append(c.examples[class], fmt.Sprintf("workload %s: %v\n  crash state: %s\n  %s%s", w.id, w, state, detail, repro))
	}
}

// problem is one failed check of a crash state.
type problem struct{ class, detail string }

// checkImage runs the checks of one crash image; img is changed (the
// recovery mount writes to it). A problem fsck finds does not stop the
// mount and the comparison: they may find more.
func (c *checker) checkImage(res *recording, img *faulty.Mem, w window) []problem {
	var out []problem
	c.images++
	if c.fsckEvery <= 1 || c.images%c.fsckEvery == 0 {
		c.fscked++
		rep, err := fsckImage(img)
		if err != nil {
			out = append(out, problem{"fsck", fmt.Sprintf("fsck -n of the crash image: %v", err)})
		} else if len(rep.Problems) > 0 {
			out = append(out, problem{"fsck", "fsck -n of the crash image: " + strings.Join(rep.Problems, "; ")})
		}
	}
	s, err := openStore(img)
	if err != nil {
		return append(out, problem{"mount", fmt.Sprintf("mount: %v", err)})
	}
	got, err := readState(s)
	if err != nil {
		s.Close()
		return append(out, problem{"read", fmt.Sprintf("reading the recovered store: %v", err)})
	}
	if cl, d := res.verify(got, w); cl != "" {
		out = append(out, problem{cl, d})
	}
	if err := s.Close(); err != nil {
		return append(out, problem{"unmount", fmt.Sprintf("unmount after recovery: %v", err)})
	}
	rep, err := fsckImage(img)
	if err != nil {
		out = append(out, problem{"fsck-recovered", fmt.Sprintf("fsck -n after recovery: %v", err)})
	} else if len(rep.Problems) > 0 || rep.Orphans > 0 {
		out = append(out, problem{"fsck-recovered", fmt.Sprintf("fsck -n after recovery: %d orphans; %s", rep.Orphans, strings.Join(rep.Problems, "; "))})
	}
	return out
}

// workload runs w and checks every crash state of its recording. It
// returns false when w could not even run.
func (c *checker) workload(e *env, w workload) bool {
	c.workloads++
	res, err := e.run(w)
	if err != nil {
		c.failure(w, "(no crash: the workload itself)", "run", err.Error())
		return false
	}
	enum := c.enum
	enum.TearUnit = sector
	states := faulty.CrashStates(res.ops, enum)
	rp := faulty.NewReplayer(e.img, res.ops, sector)
	type key struct {
		digest            uint64
		started, finished int
	}
	seen := map[key]bool{}
	failed := false
	for _, cs := range states {
		c.states++
		c.variants[cs.Variant]++
		img, err := rp.Image(cs)
		if err != nil {
			c.t.Fatalf("workload %s: %v", w.id, err)
		}
		win := res.windowAt(cs.At)
		k := key{img.Digest(), win.hi, win.finished}
		if seen[k] {
			continue
		}
		seen[k] = true
		c.distinct++
		var crashImg *faulty.Mem
		if c.recoveryEvery > 0 && c.distinct%c.recoveryEvery == 0 {
			crashImg = img.Clone()
		}
		probs := c.checkImage(res, img, win)
		for _, p := range probs {
			c.failure(w, cs.String(), p.class, p.detail)
			failed = true
		}
		if crashImg != nil && len(probs) == 0 {
			for _, p := range c.recoveryCrash(res, crashImg, win) {
				c.failure(w, cs.String()+", then a crash while recovering", "recovery-"+p.class, p.detail)
				failed = true
			}
		}
	}
	if failed {
		c.failedWorkloads++
	}
	return true
}

// recoveryCrash records the recovery mount (and unmount) of a crash image
// and checks each of its prefix and torn states with the same oracle: a
// crash during recovery must lose nothing the first crash kept.
func (c *checker) recoveryCrash(res *recording, img *faulty.Mem, w window) []problem {
	rec := faulty.NewRecorder(img.Clone())
	s, err := openStore(rec)
	if err != nil {
		return []problem{{"mount", fmt.Sprintf("mount: %v", err)}}
	}
	if err := s.Close(); err != nil {
		return []problem{{"unmount", fmt.Sprintf("unmount: %v", err)}}
	}
	ops := rec.Ops()
	enum := c.enum
	enum.TearUnit, enum.AllSubsets, enum.Subsets = sector, 0, 2
	rp := faulty.NewReplayer(img, ops, sector)
	var states []faulty.CrashState
	for _, cs := range faulty.CrashStates(ops, enum) {
		if cs.Variant != "drop" && cs.Variant != "single" {
			states = append(states, cs)
		}
	}
	if c.recoveryMax > 0 && len(states) > c.recoveryMax {
		// An even spread, in order (the Replayer builds forward).
		picked := make([]faulty.CrashState, c.recoveryMax)
		for i := range picked {
			picked[i] = states[i*len(states)/c.recoveryMax]
		}
		states = picked
	}
	for _, cs := range states {
		c.recoveryStates++
		m, err := rp.Image(cs)
		if err != nil {
			return []problem{{"replay", err.Error()}}
		}
		if probs := c.checkImage(res, m, w); len(probs) > 0 {
			for i := range probs {
				probs[i].detail = fmt.Sprintf("recovery crash state %s: %s", cs, probs[i].detail)
			}
			return probs // the first failing state of this recovery is enough
		}
	}
	return nil
}

// report logs the summary line and fails the test on any failure.
func (c *checker) report(name string, took time.Duration) {
	c.t.Helper()
	var v, f []string
	for _, k := range slices.Sorted(maps.Keys(c.variants)) {
		v = append(v, fmt.Sprintf("%s=%d", k, c.variants[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(c.fails)) {
		f = append(f, fmt.Sprintf("%s=%d", k, c.fails[k]))
	}
	c.t.Logf("%s: %d workloads, %d crash states (%s), %d distinct checked (fsck -n before recovery on %d), %d more while recovering, in %v; failures: %d workloads, by class: [%s]",
		name, c.workloads, c.states, strings.Join(v, " "), c.distinct, c.fscked, c.recoveryStates, took.Round(time.Millisecond), c.failedWorkloads, strings.Join(f, " "))
	if len(c.fails) == 0 {
		return
	}
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c.examples)) {
		fmt.Fprintf(&sb, "\n--- %s (%d):", k, c.fails[k])
		for _, e := range c.examples[k] {
			sb.WriteString("\n" + e)
		}
	}
	c.t.Errorf("%s: crash states failed:%s", name, sb.String())
}

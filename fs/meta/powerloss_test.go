package meta

// Power-loss tests: a seeded random workload runs on the meta API over a
// fault-injecting device; power is cut at a random device operation (every
// write since the last completed flush lost, except a random prefix, the
// last one possibly torn); the filesystem is checked with fsck, mounted
// again and compared with a model of what fsync acknowledged. Then the next
// round starts from the recovered state.
//
// The model and the rule it checks. fsync (and SyncAll) commit the whole
// journal, and every namespace operation (create, link, rename, remove,
// setattr, setxattr) journals its records at once, so the recovered
// namespace must be exactly the namespace after some operation between the
// last acknowledged fsync/sync and the cut (a commit point); an earlier one
// would lose an acknowledged change, anything else is not a state the
// filesystem was ever in. File contents are weaker: in-place overwrites go
// to the device without the journal and sizes are journaled lazily, so for
// each file the rule is
//   - the size is the size of one of the file's versions between its own
//     last acknowledged version (its fsync, a sync, or the round start) and
//     the commit point the namespace matched;
//   - every byte is that byte (zero past EOF) of one of the file's versions
//     from its last acknowledged one to the newest: a torn or partly flushed
//     overwrite can mix old and new bytes of the same file, but nothing
//     else may appear;
//   - xattrs are those of one of the file's versions from its last
//     acknowledged one on.
// A file untouched since its acknowledged version therefore must match it
// exactly. On top of that every byte carries a tag of its inode and offset
// (no stale data: blocks freed by one file and reused by another never show
// the old owner's bytes), and fsck of the crashed image must find no error
// (orphans are fine: the mount frees them).
//
// STREAMFS_POWERLOSS_SEED replays a run; STREAMFS_POWERLOSS_ROUNDS runs that
// many rounds without the default time box.

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

// cutDev cuts the power of a faulty device at a chosen device operation
// (write, discard or flush), before or after performing it.
type cutDev struct {
	*faulty.Device
	mu    sync.Mutex
	n     int  // device operations seen
	at    int  // cut at operation n == at; -1: disarmed
	after bool // perform the operation first
	opt   faulty.CutOptions
	cut   bool
}

func (c *cutDev) arm(at int, after bool, opt faulty.CutOptions) {
	c.mu.Lock()
	c.n, c.at, c.after, c.opt, c.cut = 0, at, after, opt, false
	c.mu.Unlock()
}

func (c *cutDev) disarm() { c.mu.Lock(); c.at = -1; c.mu.Unlock() }

func (c *cutDev) didCut() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.cut }

// op runs do, cutting the power around it when its turn comes.
func (c *cutDev) op(do func() error) error {
	c.mu.Lock()
	hit := c.at >= 0 && c.n == c.at && !c.cut
	c.n++
	after := c.after
	c.mu.Unlock()
	if hit && !after {
		c.powerCut()
	}
	err := do()
	if hit && after {
		c.powerCut()
	}
	return err
}

func (c *cutDev) powerCut() {
	c.mu.Lock()
	opt := c.opt
	c.cut = true
	c.mu.Unlock()
	if err := c.Device.PowerCut(opt); err != nil {
		panic(err)
	}
}

func (c *cutDev) WriteAt(p []byte, off int64, stream uint32) error {
	return c.op(func() error { return c.Device.WriteAt(p, off, stream) })
}

func (c *cutDev) Flush() error { return c.op(c.Device.Flush) }

func (c *cutDev) Discard(off, n int64) error {
	return c.op(func() error { return c.Device.Discard(off, n) })
}

// newTestImage makes a sparse image file of size bytes with a streamfs on it
// and returns it opened through a faulty device.
func newTestImage(t testing.TB, size int64, seed int64) (*faulty.Device, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	inner, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(inner, seed)
	t.Cleanup(func() { fd.Revive(); fd.Close() })
	if _, err := Mkfs(fd, format.MkfsParams{}); err != nil {
		t.Fatal(err)
	}
	return fd, path
}

func testOpts() Options { return Options{CommitInterval: time.Hour} }

// newTestStore opens a fresh test image of size bytes (newTestImage, seed
// 1) and closes the store when the test ends.
func newTestStore(t testing.TB, size int64) *Store {
	t.Helper()
	fd, _ := newTestImage(t, size, 1)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newPlainImage makes a sparse image file of size bytes at path (a temp
// dir when path is "") with a streamfs of ags AGs, opened without the
// fault-injecting wrapper (whose lock would serialize benchmarks). The
// device is closed when the test ends.
func newPlainImage(tb testing.TB, path string, size int64, ags uint32) backend.Device {
	tb.Helper()
	if path == "" {
		path = filepath.Join(tb.TempDir(), "img")
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		tb.Fatal(err)
	}
	dev, err := backend.OpenFile(path, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	if _, err := Mkfs(dev, format.MkfsParams{AGCount: ags}); err != nil {
		tb.Fatal(err)
	}
	return dev
}

// plVersion is one state of a file's contents.
type plVersion struct {
	op    int // operation after which it became current
	data  []byte
	xattr map[string]string
}

type plFile struct {
	ino      uint64
	versions []plVersion
	floor    int // index of the last acknowledged version
}

func (f *plFile) cur() *plVersion { return &f.versions[len(f.versions)-1] }

// plSnap is the namespace (path → inode) after operation op.
type plSnap struct {
	op int
	ns map[string]uint64
}

// plModel tracks what the filesystem must contain.
type plModel struct {
	dirs  map[uint64]map[string]uint64 // directory inode → entries
	isDir map[uint64]bool
	files map[uint64]*plFile // regular files, linked or open orphans
	op    int
	snaps []plSnap // since the last acknowledged commit
}

func newPLModel() *plModel {
	m := &plModel{dirs: map[uint64]map[string]uint64{RootIno: {}}, isDir: map[uint64]bool{RootIno: true},
		files: map[uint64]*plFile{}}
	// The empty filesystem is a state a crash may return to until the
	// first commit is acknowledged.
	m.snaps = []plSnap{{0, m.namespace()}}
	return m
}

// namespace flattens the tree into path → inode.
func (m *plModel) namespace() map[string]uint64 {
	out := map[string]uint64{}
	var walk func(dir uint64, prefix string)
	walk = func(dir uint64, prefix string) {
		for name, ino := range m.dirs[dir] {
			p := prefix + name
			out[p] = ino
			if m.isDir[ino] {
				walk(ino, p+"/")
			}
		}
	}
	walk(RootIno, "")
	return out
}

// step records the namespace after an operation.
func (m *plModel) step() {
	m.op++
	m.snaps = append(m.snaps, plSnap{m.op, m.namespace()})
}

// ack makes the current state the acknowledged one: of the namespace and
// of the given files (all files when all is set).
func (m *plModel) ack(all bool, inos ...uint64) {
	m.snaps = []plSnap{{m.op, m.namespace()}}
	if all {
		for _, f := range m.files {
			f.floor = len(f.versions) - 1
		}
	}
	for _, ino := range inos {
		if f := m.files[ino]; f != nil {
			f.floor = len(f.versions) - 1
		}
	}
}

// newVersion starts a new version of f (a copy of the current one).
func (m *plModel) newVersion(f *plFile) *plVersion {
	c := f.cur()
	v := plVersion{op: m.op + 1, data: slices.Clone(c.data), xattr: maps.Clone(c.xattr)}
	f.versions = append(f.versions, v)
	return f.cur()
}

func setSize(v *plVersion, size int) {
	if size <= len(v.data) {
		v.data = v.data[:size]
		return
	}
	v.data = append(v.data, make([]byte, size-len(v.data))...)
}

// plRun is one power-loss run.
type plRun struct {
	t    *testing.T
	rng  *rand.Rand
	dev  *cutDev
	s    *Store
	m    *plModel
	seq  int // name counter
	gen  byte
	open map[uint64]*Inode // open handles of unlinked files (orphans)
	// shutdown: an injected flush failure shut the store down this round.
	shutdown bool
	zoned    bool // fallocate's preallocation is refused (EOPNOTSUPP)
	// failedFlushes: the device's injected flush failures before this
	// round.
	failedFlushes int64
}

// zoneResets returns the zones the store's reclaim has reset.
func (r *plRun) zoneResets() uint64 {
	c, _ := r.s.ZoneCounters()
	return c.Resets
}

const plMaxFile = 192 << 10

func (r *plRun) fatalf(format string, a ...any) {
	r.t.Helper()
	r.t.Fatalf(format, a...)
}

// pick returns a random element of a sorted key list.
func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func (r *plRun) lists() (dirs, files []uint64, entries [][2]any) {
	ns := r.m.namespace()
	paths := slices.Sorted(maps.Keys(ns))
	dirs = []uint64{RootIno}
	seen := map[uint64]bool{}
	for _, p := range paths {
		ino := ns[p]
		if r.m.isDir[ino] {
			dirs = append(dirs, ino)
		} else if !seen[ino] {
			files = append(files, ino)
			seen[ino] = true
		}
	}
	for _, d := range dirs {
		for _, name := range slices.Sorted(maps.Keys(r.m.dirs[d])) {
			entries = append(entries, [2]any{d, name})
		}
	}
	return dirs, files, entries
}

func (r *plRun) name(prefix string) string { r.seq++; return prefix + strconv.Itoa(r.seq) }

// stepOp runs one random operation on the store and the model. It returns
// false once the power is gone.
func (r *plRun) stepOp() bool {
	s, m, rng := r.s, r.m, r.rng
	dirs, files, entries := r.lists()
	var allFiles []uint64 // linked files and open orphans
	allFiles = append(allFiles, files...)
	for _, ino := range slices.Sorted(maps.Keys(r.open)) {
		allFiles = append(allFiles, ino)
	}
	get := func(ino uint64) *Inode {
		in := s.Get(ino)
		if in == nil {
			if o := r.open[ino]; o != nil {
				return o
			}
			r.fatalf("op %d: inode %d missing from the store", m.op, ino)
		}
		return in
	}
	k := rng.IntN(100)
	if len(allFiles) == 0 && k >= 8 {
		k = 0
	}
	if (k < 8 && len(files) > 40) || (k >= 8 && k < 11 && len(dirs) > 15) {
		k = 65 // enough: remove something instead
	}
	var err error
	switch {
	case k < 8: // create a file
		d := pick(rng, dirs)
		name := r.name("f")
		var in *Inode
		in, err = s.Create(get(d), name, NewInode{Mode: syscall.S_IFREG | 0o644})
		if err == nil {
			m.dirs[d][name] = in.Ino()
			m.files[in.Ino()] = &plFile{ino: in.Ino(), versions: []plVersion{{op: m.op + 1}}}
		}
	case k < 11: // mkdir
		d := pick(rng, dirs)
		name := r.name("d")
		var in *Inode
		in, err = s.Create(get(d), name, NewInode{Mode: syscall.S_IFDIR | 0o755})
		if err == nil {
			m.dirs[d][name] = in.Ino()
			m.dirs[in.Ino()] = map[string]uint64{}
			m.isDir[in.Ino()] = true
		}
	case k < 40: // write: append, overwrite or beyond EOF
		ino := pick(rng, allFiles)
		f := m.files[ino]
		size := len(f.cur().data)
		var off int
		switch rng.IntN(3) {
		case 0:
			off = size
		case 1:
			off = rng.IntN(size + 1)
		default:
			off = size + rng.IntN(3*4096)
		}
		n := 1 + rng.IntN(24<<10)
		if off+n > plMaxFile {
			off = rng.IntN(plMaxFile / 2)
		}
		r.gen++
		data := datatag.Bytes(ino, int64(off), n, r.gen&0x7f)
		var wrote int
		wrote, err = s.Write(get(ino), data, int64(off), WriteOpts{})
		if wrote > 0 || r.dev.didCut() {
			if r.dev.didCut() {
				wrote = n // in flight at the cut: any part may have landed
			}
			v := m.newVersion(f)
			if len(v.data) < off+wrote {
				setSize(v, off+wrote)
			}
			copy(v.data[off:], data[:wrote])
		}
	case k < 48: // truncate up or down
		ino := pick(rng, allFiles)
		size := uint64(rng.IntN(plMaxFile))
		if rng.IntN(3) == 0 {
			size = uint64(len(m.files[ino].cur().data)) + uint64(rng.IntN(9000))
		}
		err = s.Setattr(get(ino), SetAttr{Size: &size})
		if err == nil || r.dev.didCut() {
			setSize(m.newVersion(m.files[ino]), int(size))
		}
	case k < 55: // fallocate
		ino := pick(rng, allFiles)
		f := m.files[ino]
		off := rng.IntN(plMaxFile / 2)
		n := 1 + rng.IntN(40<<10)
		modes := []uint32{0, FallocKeepSize, FallocPunchHole | FallocKeepSize, FallocZeroRange, FallocZeroRange | FallocKeepSize}
		mode := pick(rng, modes)
		err = s.Fallocate(get(ino), int64(off), int64(n), mode)
		if err == nil || r.dev.didCut() {
			v := m.newVersion(f)
			end := off + n
			if mode&(FallocKeepSize|FallocPunchHole) == 0 && end > len(v.data) {
				setSize(v, end)
			}
			if mode&(FallocPunchHole|FallocZeroRange) != 0 {
				clear(v.data[min(off, len(v.data)):min(end, len(v.data))])
			}
		}
	case k < 62: // rename
		if len(entries) == 0 {
			break
		}
		e := pick(rng, entries)
		from, name := e[0].(uint64), e[1].(string)
		to := pick(rng, dirs)
		newName := r.name("r")
		if rng.IntN(3) == 0 {
			if ents := slices.Sorted(maps.Keys(m.dirs[to])); len(ents) > 0 {
				newName = pick(rng, ents) // replace an existing entry
			}
		}
		err = s.Rename(get(from), name, get(to), newName, 0)
		src := m.dirs[from][name]
		old, replace := m.dirs[to][newName]
		if err == nil && (!replace || old != src) { // two links of one inode: nothing happens
			if replace {
				r.unlinked(old, to, newName)
			}
			delete(m.dirs[from], name)
			m.dirs[to][newName] = src
		}
	case k < 68: // remove a file or an empty directory
		if len(entries) == 0 {
			break
		}
		e := pick(rng, entries)
		d, name := e[0].(uint64), e[1].(string)
		ino := m.dirs[d][name]
		var keepOpen *Inode
		if _, open := r.open[ino]; !m.isDir[ino] && !open && rng.IntN(3) == 0 {
			keepOpen = get(ino)
			s.OpenFile(keepOpen) // becomes an orphan while open
		}
		err = s.Remove(get(d), name, m.isDir[ino])
		if err == nil {
			if keepOpen != nil {
				r.open[ino] = keepOpen
			}
			r.unlinked(ino, d, name)
		} else if keepOpen != nil {
			s.Release(keepOpen)
		}
	case k < 71: // close an unlinked file: it is freed
		if len(r.open) == 0 {
			break
		}
		ino := pick(rng, slices.Sorted(maps.Keys(r.open)))
		s.Release(r.open[ino])
		delete(r.open, ino)
	case k < 75: // hard link
		if len(files) == 0 {
			break
		}
		ino := pick(rng, files)
		d := pick(rng, dirs)
		name := r.name("l")
		err = s.Link(get(d), name, get(ino))
		if err == nil {
			m.dirs[d][name] = ino
		}
	case k < 80: // xattr
		ino := pick(rng, allFiles)
		name := fmt.Sprintf("user.k%d", rng.IntN(4))
		val := fmt.Sprintf("v%d", rng.IntN(1000))
		err = s.Setxattr(get(ino), name, []byte(val), 0)
		if err == nil {
			v := m.newVersion(m.files[ino])
			if v.xattr == nil {
				v.xattr = map[string]string{}
			}
			v.xattr[name] = val
		}
	case k < 97: // fsync a file or a directory
		if rng.IntN(5) == 0 {
			err = s.Fsync(get(pick(rng, dirs)))
			if err == nil {
				m.step()
				m.ack(false)
				return !r.dev.didCut()
			}
			break
		}
		ino := pick(rng, allFiles)
		err = s.Fsync(get(ino))
		if err == nil {
			m.step()
			m.ack(false, ino)
			return !r.dev.didCut()
		}
	default: // sync everything (the periodic commit)
		err = s.SyncAll()
		if err == nil {
			m.step()
			m.ack(true)
			return !r.dev.didCut()
		}
	}
	m.step()
	if r.dev.didCut() {
		return false
	}
	if err != nil && (s.j.Failed() || r.dev.Stats().FailedFlushes > r.failedFlushes) {
		// An injected flush failure shut the filesystem down (or, on
		// zones, broke the device under it before the journal noticed):
		// the round ends as a crash would.
		r.shutdown = true
		return false
	}
	if err != nil && !isExpected(err) && !(r.zoned && k >= 48 && k < 55 && err == syscall.EOPNOTSUPP) {
		r.fatalf("op %d (kind %d): unexpected error %v", m.op, k, err)
	}
	return true
}

// isExpected lists the errors the random workload provokes on purpose.
func isExpected(err error) bool {
	for _, e := range []error{syscall.EINVAL, syscall.ENOTEMPTY, syscall.EISDIR, syscall.ENOTDIR, syscall.EEXIST} {
		if err == e {
			return true
		}
	}
	return false
}

// unlinked drops a removed entry from the model. Files stay in m.files:
// a crash may bring back a namespace in which they still exist.
func (r *plRun) unlinked(ino, dir uint64, name string) {
	m := r.m
	delete(m.dirs[dir], name)
	if m.isDir[ino] {
		delete(m.dirs, ino)
	}
}

// readTree walks the store: path → inode.
func readTree(t testing.TB, s *Store) map[string]uint64 {
	out := map[string]uint64{}
	var walk func(d *Inode, prefix string)
	walk = func(d *Inode, prefix string) {
		ents, err := s.Readdir(d)
		if err != nil {
			t.Fatalf("readdir %s: %v", prefix, err)
		}
		for _, e := range ents {
			out[prefix+e.Name] = e.Ino
			if e.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				walk(s.Get(e.Ino), prefix+e.Name+"/")
			}
		}
	}
	walk(s.Root(), "")
	return out
}

func nsDiff(a, b map[string]uint64) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(a)) {
		if b[p] != a[p] {
			out = append(out, fmt.Sprintf("  %s: recovered %d, model %d", p, a[p], b[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[p]; !ok {
			out = append(out, fmt.Sprintf("  %s: missing (model %d)", p, b[p]))
		}
	}
	if len(out) > 20 {
		out = append(out[:20], "  ...")
	}
	return strings.Join(out, "\n")
}

// readAll reads a whole file.
func readAll(t testing.TB, s *Store, in *Inode) []byte {
	buf := make([]byte, in.Attr().Size)
	n, err := s.Read(in, buf, 0)
	if err != nil {
		t.Fatalf("read inode %d: %v", in.Ino(), err)
	}
	return buf[:n]
}

// verify checks the recovered store against the model (see the file
// comment for the rule) and resets the model to the recovered state.
func (r *plRun) verify(round int) {
	t, s, m := r.t, r.s, r.m
	t.Helper()
	got := readTree(t, s)
	pmax := -1
	for _, sn := range m.snaps {
		if maps.Equal(got, sn.ns) {
			pmax = sn.op
		}
	}
	if pmax < 0 {
		r.fatalf("round %d: recovered namespace is no state between the last acknowledged commit (op %d) and the cut (op %d)\nvs acknowledged:\n%s\nvs newest:\n%s",
			round, m.snaps[0].op, m.op, nsDiff(got, m.snaps[0].ns), nsDiff(got, m.snaps[len(m.snaps)-1].ns))
	}
	seen := map[uint64]bool{}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		ino := got[p]
		if m.isDir[ino] || seen[ino] {
			continue
		}
		seen[ino] = true
		f := m.files[ino]
		in := s.Get(ino)
		if f == nil || in == nil {
			r.fatalf("round %d: %s: inode %d unknown to the model or the store", round, p, ino)
		}
		r.verifyFile(round, p, f, in, pmax)
	}
	// The recovered state is durable (the mount wrote a checkpoint): it is
	// the next round's acknowledged state.
	nm := newPLModel()
	nm.op = m.op
	var build func(d *Inode)
	build = func(d *Inode) {
		ents, _ := s.Readdir(d)
		for _, e := range ents {
			nm.dirs[d.Ino()][e.Name] = e.Ino
			if e.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				nm.dirs[e.Ino] = map[string]uint64{}
				nm.isDir[e.Ino] = true
				build(s.Get(e.Ino))
			} else if nm.files[e.Ino] == nil {
				in := s.Get(e.Ino)
				v := plVersion{op: m.op, data: readAll(t, s, in), xattr: xattrsOf(s, in)}
				nm.files[e.Ino] = &plFile{ino: e.Ino, versions: []plVersion{v}}
			}
		}
	}
	build(s.Root())
	nm.snaps = []plSnap{{nm.op, nm.namespace()}}
	r.m = nm
	r.open = map[uint64]*Inode{}
}

func xattrsOf(s *Store, in *Inode) map[string]string {
	names, _ := s.Listxattr(in)
	if len(names) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, n := range names {
		v, _ := s.Getxattr(in, n)
		out[n] = string(v)
	}
	return out
}

func (r *plRun) verifyFile(round int, path string, f *plFile, in *Inode, pmax int) {
	t := r.t
	t.Helper()
	data := readAll(t, r.s, in)
	// No stale data: every byte is zero or this inode's own tag.
	for off, b := range data {
		if !datatag.OK(f.ino, int64(off), b) {
			w := int64(off) &^ 15
			word := data[w:min(int64(len(data)), w+16)]
			r.fatalf("round %d: %s (inode %d) byte %d is %#x, not this file's data: word %x", round, path, f.ino, off, b, word)
		}
	}
	cands := f.versions[f.floor:]
	// Size: a version from the acknowledged one to the commit point.
	sizeOK := false
	var sizes []int
	for i, v := range cands {
		if i == 0 || v.op <= pmax {
			sizes = append(sizes, len(v.data))
			if len(v.data) == len(data) {
				sizeOK = true
			}
		}
	}
	if !sizeOK {
		r.fatalf("round %d: %s (inode %d) size %d, allowed %v (commit point op %d)", round, path, f.ino, len(data), sizes, pmax)
	}
	// Content: each byte from one of the versions since the acknowledged one.
	exact := false
	for _, v := range cands {
		if bytes.Equal(v.data, data) {
			exact = true
			break
		}
	}
	if !exact {
		at := func(v plVersion, i int) byte {
			if i < len(v.data) {
				return v.data[i]
			}
			return 0
		}
		for i, b := range data {
			ok := false
			for _, v := range cands {
				if at(v, i) == b {
					ok = true
					break
				}
			}
			if !ok {
				r.fatalf("round %d: %s (inode %d) byte %d = %#x is in none of its %d versions since the acknowledged one (acknowledged: %#x, newest: %#x)",
					round, path, f.ino, i, b, len(cands), at(cands[0], i), at(cands[len(cands)-1], i))
			}
		}
	}
	// Xattrs: one of the versions since the acknowledged one.
	xa := xattrsOf(r.s, in)
	for _, v := range cands {
		if maps.Equal(xa, v.xattr) || (len(xa) == 0 && len(v.xattr) == 0) {
			return
		}
	}
	r.fatalf("round %d: %s (inode %d) xattrs %v match no version since the acknowledged one (acknowledged %v)", round, path, f.ino, xa, cands[0].xattr)
}

// sanity compares a file's contents with the model's newest version while
// the power is on (it checks the model as much as the store).
func (r *plRun) sanity(ino uint64) {
	in := r.s.Get(ino)
	if in == nil {
		in = r.open[ino]
	}
	f := r.m.files[ino]
	if in == nil || f == nil {
		return
	}
	data := make([]byte, in.Attr().Size)
	n, err := r.s.Read(in, data, 0)
	if err != nil && r.dev.didCut() {
		return // background work (zone reclaim) met the cut
	}
	if err != nil {
		r.fatalf("op %d: read inode %d: %v", r.m.op, ino, err)
	}
	data = data[:n]
	if !bytes.Equal(data, f.cur().data) {
		i := 0
		for i < len(data) && i < len(f.cur().data) && data[i] == f.cur().data[i] {
			i++
		}
		r.fatalf("op %d: inode %d differs from the model at byte %d (size %d, model %d)", r.m.op, ino, i, len(data), len(f.cur().data))
	}
}

func envInt(t testing.TB, name string, def int64) int64 {
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

func TestPowerLoss(t *testing.T) {
	seed := envInt(t, "STREAMFS_POWERLOSS_SEED", time.Now().UnixNano())
	fd, _ := newTestImage(t, 32<<20, seed)
	runPowerLoss(t, seed, fd, plTarget{})
}

// plTarget is what a power-loss run mounts on its cut device.
type plTarget struct {
	// over returns the device the filesystem sees on dev (ro: for fsck);
	// nil: dev itself.
	over func(dev backend.Device, ro bool) (backend.Device, error)
	// zoned: the filesystem is zoned (fallocate's preallocation is
	// refused; reclaim runs, and must have reset zones by the end).
	zoned bool
}

func (tg plTarget) dev(dev backend.Device, ro bool) (backend.Device, error) {
	if tg.over == nil {
		return dev, nil
	}
	return tg.over(dev, ro)
}

// open mounts the filesystem on dev.
func (tg plTarget) open(dev backend.Device) (*Store, error) {
	d, err := tg.dev(dev, false)
	if err != nil {
		return nil, err
	}
	return Open(d, testOpts())
}

// fsck checks the filesystem on dev without changing it.
func (tg plTarget) fsck(dev backend.Device) (*fsck.Report, error) {
	d, err := tg.dev(dev, true)
	if err != nil {
		return nil, err
	}
	return Fsck(d, fsck.Options{})
}

// runPowerLoss runs power-loss rounds (see the file comment) on the
// filesystem fd holds, seen through tg, for the time budget or
// STREAMFS_POWERLOSS_ROUNDS rounds.
func runPowerLoss(t *testing.T, seed int64, fd *faulty.Device, tg plTarget) {
	rounds := int(envInt(t, "STREAMFS_POWERLOSS_ROUNDS", 0))
	budget := 25 * time.Second
	if testing.Short() {
		budget = 5 * time.Second
	}
	if rounds > 0 {
		budget = 0
	} else {
		rounds = 1 << 30
	}
	t.Logf("seed %d (replay: STREAMFS_POWERLOSS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	dev := &cutDev{Device: fd, at: -1}
	r := &plRun{t: t, rng: rng, dev: dev, m: newPLModel(), open: map[uint64]*Inode{}, zoned: tg.zoned}
	var err error
	if r.s, err = tg.open(dev); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	round := 0
	defer func() {
		if t.Failed() {
			t.Logf("failed in round %d; replay with STREAMFS_POWERLOSS_SEED=%d STREAMFS_POWERLOSS_ROUNDS=%d", round, seed, round+1)
		}
	}()
	stats := map[string]int{}
	var resets uint64
	for round = 0; round < rounds; round++ {
		// A zoned run goes on past the budget until reclaim has reset a
		// zone: the test is about surviving cuts around reclaim.
		if budget > 0 && time.Since(start) > budget && (!tg.zoned || resets > 0) {
			break
		}
		ops := 20 + rng.IntN(200)
		// Half the cuts reorder what the device's cache had not destaged;
		// a quarter of the rounds also fail one flush, which shuts the
		// filesystem down (the flush may have landed, or lost its writes).
		opt := faulty.CutOptions{KeepRandomPrefix: rng.IntN(4) != 0, TearLast: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			opt = faulty.CutOptions{Reorder: true, TearLast: rng.IntN(2) == 0, TearAny: rng.IntN(2) == 0}
		}
		dev.arm(rng.IntN(2*ops+1), rng.IntN(2) == 0, opt)
		r.shutdown = false
		r.failedFlushes = fd.Stats().FailedFlushes
		if rng.IntN(4) == 0 {
			outcome := []faulty.FlushOutcome{faulty.FlushFailed, faulty.FlushFailedLanded, faulty.FlushFailedLost}[rng.IntN(3)]
			fd.FailNthFlush(int64(1+rng.IntN(ops/2+1)), outcome)
		}
		for i := 0; i < ops; i++ {
			if !r.stepOp() {
				break
			}
			if rng.IntN(4) == 0 && len(r.m.files) > 0 && !dev.didCut() {
				r.sanity(pick(rng, slices.Sorted(maps.Keys(r.m.files))))
			}
		}
		fd.InjectFlushFaults(nil)
		if r.shutdown {
			stats["shut down by a failed flush"]++
		}
		if opt.Reorder {
			stats["reordered cuts"]++
		}
		if !dev.didCut() {
			stats["cut between operations"]++
			dev.disarm()
			if err := fd.PowerCut(opt); err != nil {
				t.Fatal(err)
			}
		} else {
			stats["cut inside an operation"]++
		}
		dev.disarm()
		resets += r.zoneResets()
		r.s.Close() // a crashed process: nothing reaches the device any more
		fd.Revive()

		rep, err := tg.fsck(dev)
		if err != nil {
			t.Fatalf("round %d: fsck: %v", round, err)
		}
		if len(rep.Problems) > 0 {
			t.Fatalf("round %d: fsck of the crashed image:\n%s", round, strings.Join(rep.Problems, "\n"))
		}
		if rep.Orphans > 0 {
			stats["rounds with orphans"]++
		}
		if rep.ReplayedCommits > 0 {
			stats["rounds replaying the journal"]++
		}
		// Sometimes the power goes again while mounting (the recovery
		// checkpoint): the next mount must cope as well.
		if rng.IntN(8) == 0 {
			dev.arm(rng.IntN(5), rng.IntN(2) == 0, faulty.CutOptions{KeepRandomPrefix: true, TearLast: rng.IntN(2) == 0})
			if s, err := tg.open(dev); err == nil {
				s.Close()
			}
			dev.disarm()
			if dev.didCut() {
				stats["cut while mounting"]++
				fd.Revive()
			}
		}
		if r.s, err = tg.open(dev); err != nil {
			t.Fatalf("round %d: mount after power loss: %v", round, err)
		}
		r.verify(round)
	}
	for _, in := range r.open {
		r.s.Release(in)
	}
	resets += r.zoneResets()
	if err := r.s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := tg.fsck(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 || rep.Orphans > 0 {
		t.Fatalf("fsck after a clean unmount: %v, %d orphans", rep.Problems, rep.Orphans)
	}
	keys := slices.Sorted(maps.Keys(stats))
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, " %s=%d", k, stats[k])
	}
	t.Logf("%d rounds in %v:%s", round, time.Since(start).Round(time.Millisecond), sb.String())
	if tg.zoned {
		t.Logf("%d zones reset by reclaim", resets)
		if resets == 0 {
			t.Fatalf("reclaim reset no zone in %d rounds", round)
		}
	}
}

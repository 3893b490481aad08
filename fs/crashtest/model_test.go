package crashtest

// The model: what the filesystem holds after each step of a workload, and
// the operations that change it, applied alike to the model and to a
// meta.Store.

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/meta"
)

// inodeState is one inode's contents in the model.
type inodeState struct {
	dir    bool
	data   []byte
	xattr  map[string]string
	stream uint32
}

// state is the whole filesystem after one step. States share inodeStates
// (copy on write, see mut), so keeping one per step is cheap.
type state struct {
	ns     map[string]uint64      // path ("A", "A/foo") → inode; the root is not listed
	inodes map[uint64]*inodeState // every inode ever seen, unlinked ones too
}

func newState() *state {
	return &state{ns: map[string]uint64{}, inodes: map[uint64]*inodeState{meta.RootIno: {dir: true}}}
}

func (st *state) clone() *state {
	return &state{ns: maps.Clone(st.ns), inodes: maps.Clone(st.inodes)}
}

// mut returns a private copy of inode ino to change.
func (st *state) mut(ino uint64) *inodeState {
	c := *st.inodes[ino]
	c.data = slices.Clone(c.data)
	c.xattr = maps.Clone(c.xattr)
	st.inodes[ino] = &c
	return &c
}

// lookup returns the inode at p ("" is the root).
func (st *state) lookup(p string) (uint64, *inodeState) {
	if p == "" {
		return meta.RootIno, st.inodes[meta.RootIno]
	}
	ino, ok := st.ns[p]
	if !ok {
		return 0, nil
	}
	return ino, st.inodes[ino]
}

func parent(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// children lists the paths directly inside directory p.
func (st *state) children(p string) []string {
	var out []string
	prefix := p + "/"
	if p == "" {
		prefix = ""
	}
	for q := range st.ns {
		if strings.HasPrefix(q, prefix) && !strings.Contains(q[len(prefix):], "/") {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out
}

// links counts the names of ino.
func (st *state) links(ino uint64) int {
	n := 0
	for _, i := range st.ns {
		if i == ino {
			n++
		}
	}
	return n
}

func (st *state) size(p string) int64 {
	_, in := st.lookup(p)
	if in == nil {
		return 0
	}
	return int64(len(in.data))
}

// opKind names an operation.
type opKind int

const (
	opCreate opKind = iota
	opMkdir
	opWrite
	opFalloc
	opTrunc
	opLink
	opUnlink
	opRename
	opRmdir
	opSetxattr
	opSetstream
	// Persistence operations: they change nothing, they acknowledge.
	opFsync
	opFdatasync
	opSync
)

// op is one operation of a workload. Offsets and sizes with rel set count
// from the file's size at the time (appends, truncates up).
type op struct {
	kind   opKind
	path   string
	path2  string // link and rename targets
	off, n int64  // write, fallocate; trunc: the size
	rel    bool
	mode   uint32 // fallocate mode
	name   string // xattr name
	val    string // xattr value
	stream uint32
}

func (o op) String() string {
	at := func(v int64) string {
		if o.rel {
			return fmt.Sprintf("EOF%+d", v)
		}
		return fmt.Sprint(v)
	}
	switch o.kind {
	case opCreate:
		return "creat " + o.path
	case opMkdir:
		return "mkdir " + o.path
	case opWrite:
		return fmt.Sprintf("write %s @%s+%d", o.path, at(o.off), o.n)
	case opFalloc:
		return fmt.Sprintf("falloc(%#x) %s @%s+%d", o.mode, o.path, at(o.off), o.n)
	case opTrunc:
		return fmt.Sprintf("trunc %s %s", o.path, at(o.off))
	case opLink:
		return fmt.Sprintf("link %s %s", o.path, o.path2)
	case opUnlink:
		return "unlink " + o.path
	case opRename:
		return fmt.Sprintf("rename %s %s", o.path, o.path2)
	case opRmdir:
		return "rmdir " + o.path
	case opSetxattr:
		return fmt.Sprintf("setxattr %s %s=%s", o.path, o.name, o.val)
	case opSetstream:
		return fmt.Sprintf("setstream %s %d", o.path, o.stream)
	case opFsync:
		return "fsync " + o.path
	case opFdatasync:
		return "fdatasync " + o.path
	case opSync:
		return "sync"
	}
	return fmt.Sprintf("op(%d)", int(o.kind))
}

func (o op) persist() bool { return o.kind >= opFsync }

// valid reports whether o succeeds on st: the enumeration keeps only
// workloads whose every operation does something.
func (o op) valid(st *state) bool {
	ino, in := st.lookup(o.path)
	_, par := st.lookup(parent(o.path))
	switch o.kind {
	case opCreate, opMkdir:
		return in == nil && par != nil && par.dir
	case opWrite, opFalloc, opTrunc, opUnlink, opFdatasync:
		return in != nil && !in.dir && ino != meta.RootIno
	case opLink:
		_, dst := st.lookup(o.path2)
		_, dpar := st.lookup(parent(o.path2))
		return in != nil && !in.dir && dst == nil && dpar != nil && dpar.dir
	case opRename:
		dino, dst := st.lookup(o.path2)
		_, dpar := st.lookup(parent(o.path2))
		if in == nil || ino == meta.RootIno || dpar == nil || !dpar.dir || strings.HasPrefix(o.path2+"/", o.path+"/") {
			return false
		}
		if dst == nil {
			return true
		}
		if dino == ino || dst.dir != in.dir {
			return false
		}
		return !dst.dir || len(st.children(o.path2)) == 0
	case opRmdir:
		return in != nil && in.dir && ino != meta.RootIno && len(st.children(o.path)) == 0
	case opSetxattr, opSetstream, opFsync:
		return in != nil
	case opSync:
		return true
	}
	return false
}

// abs resolves a relative offset against the file's size in st.
func (o op) abs(st *state) (off int64) {
	if o.rel {
		return st.size(o.path) + o.off
	}
	return o.off
}

// applyModel changes st as o does; ino is the new inode of a create or
// mkdir, gen the write generation.
func (o op) applyModel(st *state, ino uint64, gen byte) {
	switch o.kind {
	case opCreate, opMkdir:
		_, par := st.lookup(parent(o.path))
		st.ns[o.path] = ino
		st.inodes[ino] = &inodeState{dir: o.kind == opMkdir, stream: par.stream}
	case opWrite:
		fino, _ := st.lookup(o.path)
		off := o.abs(st)
		in := st.mut(fino)
		if int64(len(in.data)) < off+o.n {
			in.data = append(in.data, make([]byte, off+o.n-int64(len(in.data)))...)
		}
		copy(in.data[off:], datatag.Bytes(fino, off, int(o.n), gen))
	case opFalloc:
		fino, _ := st.lookup(o.path)
		off := o.abs(st)
		in := st.mut(fino)
		end := off + o.n
		if o.mode&(meta.FallocKeepSize|meta.FallocPunchHole) == 0 && end > int64(len(in.data)) {
			in.data = append(in.data, make([]byte, end-int64(len(in.data)))...)
		}
		if o.mode&(meta.FallocPunchHole|meta.FallocZeroRange) != 0 {
			size := int64(len(in.data))
			clear(in.data[min(off, size):min(end, size)])
		}
	case opTrunc:
		fino, _ := st.lookup(o.path)
		size := o.abs(st)
		in := st.mut(fino)
		if size <= int64(len(in.data)) {
			in.data = in.data[:size]
		} else {
			in.data = append(in.data, make([]byte, size-int64(len(in.data)))...)
		}
	case opLink:
		st.ns[o.path2] = st.ns[o.path]
	case opUnlink, opRmdir:
		delete(st.ns, o.path)
	case opRename:
		if st.ns[o.path] == st.ns[o.path2] {
			return // two names of one inode: nothing happens
		}
		moved := map[string]uint64{}
		for p, i := range st.ns {
			if p == o.path || strings.HasPrefix(p, o.path+"/") {
				moved[o.path2+p[len(o.path):]] = i
				delete(st.ns, p)
			}
		}
		delete(st.ns, o.path2)
		maps.Copy(st.ns, moved)
	case opSetxattr:
		fino, _ := st.lookup(o.path)
		in := st.mut(fino)
		if in.xattr == nil {
			in.xattr = map[string]string{}
		}
		in.xattr[o.name] = o.val
	case opSetstream:
		fino, _ := st.lookup(o.path)
		st.mut(fino).stream = o.stream
	}
}

// storeRun applies operations to a mounted store, resolving paths as the
// kernel would, and keeps the inodes it used referenced.
type storeRun struct {
	s    *meta.Store
	pins map[uint64]*meta.Inode
}

func (r *storeRun) resolve(p string) (*meta.Inode, error) {
	in := r.s.Root()
	if p == "" {
		return in, nil
	}
	for _, name := range strings.Split(p, "/") {
		next, err := r.s.Lookup(in, name)
		if err != nil {
			return nil, fmt.Errorf("lookup %s in %s: %w", name, p, err)
		}
		in = next
	}
	r.pins[in.Ino()] = in
	return in, nil
}

// apply runs o on the store; st is the model before it (for relative
// offsets and the write's tag). It returns the new inode of a create.
func (r *storeRun) apply(o op, st *state, gen byte) (uint64, error) {
	s := r.s
	in, err := r.resolve(o.path)
	if o.kind == opCreate || o.kind == opMkdir || o.kind == opSync {
		in, err = nil, nil
	}
	if err != nil {
		return 0, err
	}
	switch o.kind {
	case opCreate, opMkdir:
		dir, err := r.resolve(parent(o.path))
		if err != nil {
			return 0, err
		}
		mode := uint32(syscall.S_IFREG | 0o644)
		if o.kind == opMkdir {
			mode = syscall.S_IFDIR | 0o755
		}
		n, err := s.Create(dir, path.Base(o.path), meta.NewInode{Mode: mode})
		if err != nil {
			return 0, fmt.Errorf("%v: %w", o, err)
		}
		r.pins[n.Ino()] = n
		return n.Ino(), nil
	case opWrite:
		off := o.abs(st)
		n, err := s.Write(in, datatag.Bytes(in.Ino(), off, int(o.n), gen), off, meta.WriteOpts{})
		if err == nil && int64(n) != o.n {
			err = fmt.Errorf("short write %d of %d", n, o.n)
		}
		return 0, err
	case opFalloc:
		return 0, s.Fallocate(in, o.abs(st), o.n, o.mode)
	case opTrunc:
		size := uint64(o.abs(st))
		return 0, s.Setattr(in, meta.SetAttr{Size: &size})
	case opLink:
		dir, err := r.resolve(parent(o.path2))
		if err != nil {
			return 0, err
		}
		return 0, s.Link(dir, path.Base(o.path2), in)
	case opUnlink, opRmdir:
		dir, err := r.resolve(parent(o.path))
		if err != nil {
			return 0, err
		}
		return 0, s.Remove(dir, path.Base(o.path), o.kind == opRmdir)
	case opRename:
		from, err := r.resolve(parent(o.path))
		if err != nil {
			return 0, err
		}
		to, err := r.resolve(parent(o.path2))
		if err != nil {
			return 0, err
		}
		return 0, s.Rename(from, path.Base(o.path), to, path.Base(o.path2), 0)
	case opSetxattr:
		return 0, s.Setxattr(in, o.name, []byte(o.val), 0)
	case opSetstream:
		return 0, s.SetStream(in, o.stream)
	case opFsync, opFdatasync:
		// The FUSE layer serves fsync and fdatasync with this one call
		// (fs/file.go ignores the datasync flag).
		return 0, s.Fsync(in)
	case opSync:
		return 0, s.SyncAll()
	}
	return 0, fmt.Errorf("unknown op %v", o)
}

// recovered is what a mounted store holds: a state plus the link counts
// the inodes claim.
type recovered struct {
	*state
	nlink map[uint64]uint32
}

// readState reads the whole namespace and every inode's contents.
func readState(s *meta.Store) (*recovered, error) {
	got := &recovered{state: newState(), nlink: map[uint64]uint32{}}
	var walk func(dir *meta.Inode, prefix string) error
	readInode := func(in *meta.Inode) error {
		if _, ok := got.inodes[in.Ino()]; ok && in.Ino() != meta.RootIno {
			return nil
		}
		a := in.Attr()
		is := &inodeState{dir: in.IsDir(), stream: a.Stream}
		got.nlink[in.Ino()] = a.Nlink
		if in.IsReg() {
			is.data = make([]byte, a.Size)
			n, err := s.Read(in, is.data, 0)
			if err != nil {
				return fmt.Errorf("read inode %d: %w", in.Ino(), err)
			}
			if n != len(is.data) {
				return fmt.Errorf("read inode %d: %d of %d bytes", in.Ino(), n, len(is.data))
			}
		}
		names, err := s.Listxattr(in)
		if err != nil {
			return fmt.Errorf("listxattr inode %d: %w", in.Ino(), err)
		}
		for _, name := range names {
			v, err := s.Getxattr(in, name)
			if err != nil {
				return fmt.Errorf("getxattr inode %d %s: %w", in.Ino(), name, err)
			}
			if is.xattr == nil {
				is.xattr = map[string]string{}
			}
			is.xattr[name] = string(v)
		}
		got.inodes[in.Ino()] = is
		return nil
	}
	walk = func(dir *meta.Inode, prefix string) error {
		ents, err := s.Readdir(dir)
		if err != nil {
			return fmt.Errorf("readdir %q: %w", prefix, err)
		}
		for _, e := range ents {
			p := prefix + e.Name
			got.ns[p] = e.Ino
			in := s.Get(e.Ino)
			if in == nil {
				return fmt.Errorf("%s: entry for inode %d, which does not load", p, e.Ino)
			}
			if err := readInode(in); err != nil {
				return err
			}
			if in.IsDir() {
				if err := walk(in, p+"/"); err != nil {
					return err
				}
			}
		}
		return nil
	}
	root := s.Root()
	if root == nil {
		return nil, fmt.Errorf("no root inode")
	}
	if err := readInode(root); err != nil {
		return nil, err
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	return got, nil
}

// sameMeta compares what is journaled at once by every operation: names,
// xattrs and streams. Sizes and data are compared per file (dataCheck):
// a write journals its mapping at once but its size lazily.
func sameMeta(a, b *state) bool {
	if !maps.Equal(a.ns, b.ns) {
		return false
	}
	for _, ino := range slices.Collect(maps.Values(a.ns)) {
		x, y := a.inodes[ino], b.inodes[ino]
		if x == nil || y == nil || x.dir != y.dir || x.stream != y.stream || !xattrEqual(x.xattr, y.xattr) {
			return false
		}
	}
	x, y := a.inodes[meta.RootIno], b.inodes[meta.RootIno]
	return x.stream == y.stream && xattrEqual(x.xattr, y.xattr)
}

func xattrEqual(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 || maps.Equal(a, b) }

// metaDiff describes how got differs from want, briefly.
func metaDiff(got, want *state) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(got.ns)) {
		w, ok := want.ns[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("+%s(%d)", p, got.ns[p]))
		case w != got.ns[p]:
			out = append(out, fmt.Sprintf("%s: %d, want %d", p, got.ns[p], w))
		default:
			x, y := got.inodes[w], want.inodes[w]
			if x.stream != y.stream {
				out = append(out, fmt.Sprintf("%s: stream %d, want %d", p, x.stream, y.stream))
			}
			if !xattrEqual(x.xattr, y.xattr) {
				out = append(out, fmt.Sprintf("%s: xattrs %v, want %v", p, x.xattr, y.xattr))
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(want.ns)) {
		if _, ok := got.ns[p]; !ok {
			out = append(out, fmt.Sprintf("-%s(%d)", p, want.ns[p]))
		}
	}
	if len(out) == 0 {
		return "(root xattrs or stream)"
	}
	return strings.Join(out, " ")
}

func byteAt(d []byte, i int) byte {
	if i < len(d) {
		return d[i]
	}
	return 0
}

// firstDiff is the first offset where a and b differ.
func firstDiff(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) && i == len(b) {
		return -1
	}
	return i
}

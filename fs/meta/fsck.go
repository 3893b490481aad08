package meta

import (
	"errors"
	"fmt"
	"sort"
	"syscall"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
)

// FsckOptions select what Fsck does.
type FsckOptions struct {
	// Repair fixes what can be fixed in memory and writes the result as a
	// new checkpoint (fsck -y). Without it nothing is written (fsck -n).
	Repair bool
	Logger *zap.Logger
}

// FsckReport is what Fsck found. Problems are errors; each one Fsck
// repaired is counted in Fixed too. Notes are not errors: leftovers of a
// crash that the next mount cleans up by design (orphans).
type FsckReport struct {
	Problems []string
	Fixed    int
	Notes    []string

	Checkpoint      uint64 // sequence of the checkpoint loaded
	ReplayedCommits int
	Inodes          int
	Dirs, Files     int
	Orphans         int    // unlinked inodes the next mount frees
	UsedBlocks      uint64 // data blocks files map
	FreeBlocks      uint64
	Wrote           bool // a repaired checkpoint or superblock was written
}

// Fsck exit statuses (as e2fsck's).
const (
	FsckClean       = 0
	FsckCorrected   = 1
	FsckUncorrected = 4
	FsckOperational = 8
	FsckUsage       = 16
)

// ExitCode maps the report to e2fsck's exit status: 0 clean, 1 every
// error corrected, 4 errors left uncorrected.
func (r *FsckReport) ExitCode() int {
	switch {
	case len(r.Problems) == 0:
		return FsckClean
	case r.Fixed >= len(r.Problems):
		return FsckCorrected
	default:
		return FsckUncorrected
	}
}

// Fsck checks the filesystem on dev, which the caller has opened with its
// exclusive lock (nothing may have it mounted). It loads the newest
// checkpoint and replays the journal in memory, then checks the superblock
// copies, every extent (inside the data area, no two overlapping), the
// directory tree (entries point at inodes, every directory reachable from
// the root exactly once, parent pointers, no cycles), link counts and the
// free-space accounting. With opts.Repair it fixes what it can and writes
// a new checkpoint. The error is for operational failures only (unreadable,
// foreign or newer-format device); metadata errors are in the report.
func Fsck(dev backend.Device, opts FsckOptions) (*FsckReport, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	rep := &FsckReport{}
	f := &fsck{rep: rep, repair: opts.Repair}
	sb, writeSuper, err := f.checkSuper(dev)
	if err != nil {
		return nil, err
	}
	if sb.ReadOnlyOnly() || sb.Compat&^format.CompatSupported != 0 {
		return nil, fmt.Errorf("filesystem has features %#x/%#x this fsck does not know: %w",
			sb.Compat, sb.ROCompat, format.ErrNewerFormat)
	}
	s := newStore(dev, sb, Options{Logger: log}, !opts.Repair)
	f.s = s
	lenient := func(r *format.Record) error {
		if err := s.apply(r); err != nil {
			f.problem(true, "%v: record dropped", err)
		}
		return nil
	}
	badCommit := false
	s.badCommit = func(err error) {
		badCommit = f.problem(true, "%v: the journal ends before it", err)
	}
	h, commits, _, err := s.load(lenient)
	if err != nil {
		// Without a readable checkpoint there is nothing to repair from.
		f.problem(false, "loading metadata: %v", err)
		return rep, nil
	}
	rep.Checkpoint, rep.ReplayedCommits = h.Seq, commits
	if err := s.newAllocator(); err != nil {
		return nil, err
	}
	defer s.alloc.Close()
	f.checkState()
	if !opts.Repair || rep.Fixed == 0 {
		return rep, nil
	}
	// Write the repaired state: superblocks first (the checkpoint is only
	// found through a good superblock), then a checkpoint of everything.
	if writeSuper {
		if err := WriteSuper(dev, sb); err != nil {
			return nil, fmt.Errorf("rewriting superblocks: %w", err)
		}
	}
	if badCommit {
		// The commits after the bad one are still in the journal: start the
		// sequence far beyond them so replay never reaches any of them.
		s.j.openTx += 1 << 32
	}
	s.j.commitMu.Lock()
	err = s.j.checkpointLocked()
	s.j.commitMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("writing repaired checkpoint: %w", err)
	}
	rep.Wrote = true
	return rep, nil
}

// fsck is one check run over a loaded Store.
type fsck struct {
	s      *Store
	rep    *FsckReport
	repair bool

	visited    map[uint64]bool   // reachable from the root
	treeParent map[uint64]uint64 // directory → the directory holding its one entry
	lf         *Inode            // lost+found, made on demand
}

// problem reports an error. It returns true when the caller should repair
// it: in repair mode and when the problem is fixable.
func (f *fsck) problem(fixable bool, msg string, a ...any) bool {
	m := fmt.Sprintf(msg, a...)
	fix := f.repair && fixable
	if fix {
		m += " (fixed)"
		f.rep.Fixed++
	}
	f.rep.Problems = append(f.rep.Problems, m)
	return fix
}

func (f *fsck) note(msg string, a ...any) { f.rep.Notes = append(f.rep.Notes, fmt.Sprintf(msg, a...)) }

// checkSuper compares the primary superblock with the backup. It returns
// the superblock to use and whether both copies must be rewritten.
func (f *fsck) checkSuper(dev backend.Device) (*format.Super, bool, error) {
	if dev.Size() < format.SuperSize {
		_, _, err := ReadSuper(dev) // explains that the device is too small
		return nil, false, err
	}
	buf := make([]byte, format.SuperSize)
	if err := dev.ReadAt(buf, 0); err != nil {
		return nil, false, fmt.Errorf("reading superblock: %w", err)
	}
	primary, perr := format.DecodeSuper(buf)
	if perr == nil && primary.TotalBlocks*uint64(primary.BlockSize) > uint64(dev.Size()) {
		perr = fmt.Errorf("superblock says %d bytes, device has %d: %w",
			primary.TotalBlocks*uint64(primary.BlockSize), dev.Size(), format.ErrCorrupt)
	}
	if perr != nil {
		if errors.Is(perr, format.ErrNewerFormat) {
			return nil, false, perr
		}
		sb, _, err := ReadSuper(dev)
		if err != nil {
			return nil, false, err
		}
		fix := f.problem(true, "primary superblock: %v; the backup copy is good", perr)
		return sb, fix, nil
	}
	bb := make([]byte, format.SuperSize)
	if err := dev.ReadAt(bb, int64(primary.BackupBlock*uint64(primary.BlockSize))); err != nil {
		return nil, false, fmt.Errorf("reading backup superblock: %w", err)
	}
	backup, berr := format.DecodeSuper(bb)
	switch {
	case berr != nil:
		return primary, f.problem(true, "backup superblock: %v", berr), nil
	case *backup != *primary:
		return primary, f.problem(true, "backup superblock differs from the primary"), nil
	}
	return primary, false, nil
}

// validType reports the file types streamfs stores.
func validType(mode uint32) bool {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFCHR,
		syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK:
		return true
	}
	return false
}

// checkState checks (and with repair fixes) the loaded in-memory state. It
// does no I/O, so the fuzz tests run it on arbitrary record streams. The
// allocator must exist and be all free.
func (f *fsck) checkState() {
	s := f.s
	f.checkRoot()
	for _, in := range s.itab.all() {
		f.checkInode(in)
	}
	f.checkSpace()
	f.checkAGs() // before the tree check may make lost+found
	f.checkTree()
	f.checkLinks()
	f.checkFree()
	for _, in := range s.itab.all() {
		f.rep.Inodes++
		switch {
		case in.IsDir():
			f.rep.Dirs++
		case in.IsReg():
			f.rep.Files++
		}
	}
}

func (f *fsck) checkRoot() {
	s := f.s
	root := s.itab.get(RootIno)
	if root != nil && root.IsDir() {
		return
	}
	what := "missing"
	if root != nil {
		what = fmt.Sprintf("not a directory (mode %#o)", root.attr.Mode)
	}
	if !f.problem(true, "root directory %s: made a new, empty one", what) {
		return
	}
	if root != nil {
		// Keep the old inode's contents reachable under a new number.
		old := root
		s.itab.del(RootIno)
		// newIno fails only when every AG's numbers are spent; the old
		// contents then stay under number 0 and show up as unreachable.
		old.attr.Ino, _ = s.newIno(old, false)
		old.attr.Nlink = 1
		s.itab.put(old)
		s.moveInoRefs(RootIno, old.attr.Ino)
	}
	t := now()
	s.itab.put(&Inode{attr: format.InodeRec{Ino: RootIno, Mode: syscall.S_IFDIR | 0o755, Nlink: 2,
		Atime: t, Mtime: t, Ctime: t, Btime: t, Parent: RootIno}, dir: make(map[string]uint64)})
	s.bumpAGNext(RootIno)
}

// moveInoRefs renames inode number from to to in every directory entry.
func (s *Store) moveInoRefs(from, to uint64) {
	for _, d := range s.itab.all() {
		for name, ino := range d.dir {
			if ino == from && d.attr.Ino != to {
				d.dir[name] = to
			}
		}
	}
}

func (f *fsck) checkInode(in *Inode) {
	ino := in.attr.Ino
	if !validType(in.attr.Mode) {
		if f.problem(true, "inode %d has unknown file type %#o: made a regular file", ino, in.attr.Mode&syscall.S_IFMT) {
			in.attr.Mode = syscall.S_IFREG | in.attr.Mode&0o7777
			in.typ = syscall.S_IFREG
		}
	}
	if !in.IsDir() && len(in.dir) > 0 {
		if f.problem(true, "non-directory inode %d holds %d directory entries: entries dropped", ino, len(in.dir)) {
			in.dir = nil
		}
	}
	if !in.IsDir() && len(in.dir) == 0 && f.repair {
		in.dir = nil
	}
	if in.IsDir() && in.dir == nil {
		in.dir = make(map[string]uint64)
	}
	if !in.IsReg() && len(in.ext.ext) > 0 {
		if f.problem(true, "inode %d (mode %#o) is not a regular file but maps %d extents: extents dropped",
			ino, in.attr.Mode, len(in.ext.ext)) {
			in.ext.ext = nil
		}
	}
	if in.attr.Mode&syscall.S_IFMT == syscall.S_IFLNK && in.attr.Size != uint64(len(in.attr.Target)) {
		if f.problem(true, "symlink %d size %d, target is %d bytes", ino, in.attr.Size, len(in.attr.Target)) {
			in.attr.Size = uint64(len(in.attr.Target))
		}
	}
	if in.IsReg() && in.attr.Size > MaxFileSize {
		if f.problem(true, "inode %d size %d beyond the maximum %d", ino, in.attr.Size, uint64(MaxFileSize)) {
			in.attr.Size = MaxFileSize
		}
	}
	// The extent map invariant: sorted, non-empty, non-overlapping.
	for i, x := range in.ext.ext {
		bad := x.Len == 0 || x.LBlk+x.Len < x.LBlk || (i > 0 && in.ext.ext[i-1].End() > x.LBlk)
		if bad {
			if f.problem(true, "inode %d extent map out of order or overlapping at extent %d: rebuilt", ino, i) {
				var m extentMap
				for _, y := range in.ext.ext {
					if y.Len > 0 && y.LBlk+y.Len > y.LBlk {
						m.set(y)
					}
				}
				in.ext = m
			}
			break
		}
	}
	for _, x := range append([]Extent(nil), in.ext.ext...) {
		if x.PBlk < f.s.sb.MetaEnd() || x.PBlk+x.Len > f.s.sb.BackupBlock || x.PBlk+x.Len < x.PBlk {
			if f.problem(true, "inode %d extent %d+%d at block %d outside the data area: dropped", ino, x.LBlk, x.Len, x.PBlk) {
				in.ext.punch(x.LBlk, x.Len)
			}
		}
	}
}

// checkSpace marks metadata and every extent used in the (all-free)
// allocator; an extent that finds blocks already used overlaps metadata or
// an extent of an inode checked before (a lower inode number): the later
// inode loses that extent.
func (f *fsck) checkSpace() {
	s := f.s
	sb := s.sb
	if err := s.alloc.MarkUsed(0, sb.MetaEnd()); err != nil {
		f.problem(false, "marking the metadata area used: %v", err)
		return
	}
	if err := s.alloc.MarkUsed(sb.BackupBlock, sb.TotalBlocks-sb.BackupBlock); err != nil {
		f.problem(false, "marking the backup superblock used: %v", err)
		return
	}
	for _, in := range s.itab.all() {
		for _, x := range append([]Extent(nil), in.ext.ext...) {
			if err := s.alloc.MarkUsed(x.PBlk, x.Len); err != nil {
				if f.problem(true, "inode %d extent %d+%d at block %d overlaps blocks already in use: dropped",
					in.attr.Ino, x.LBlk, x.Len, x.PBlk) {
					in.ext.punch(x.LBlk, x.Len)
				}
				continue
			}
			f.rep.UsedBlocks += x.Len
		}
	}
}

// checkTree walks the directory tree from the root.
func (f *fsck) checkTree() {
	s := f.s
	f.visited = map[uint64]bool{}
	f.treeParent = map[uint64]uint64{}
	// Entries must point at existing inodes.
	for _, d := range s.itab.all() {
		for _, name := range sortedNames(d.dir) {
			if ino := d.dir[name]; s.itab.get(ino) == nil {
				if f.problem(true, "directory %d entry %q points at missing inode %d: entry dropped", d.attr.Ino, name, ino) {
					delete(d.dir, name)
				}
			}
		}
	}
	root := s.itab.get(RootIno)
	if root == nil || !root.IsDir() {
		f.problem(false, "no root directory: directory tree not checked")
		return
	}
	f.walk(root, RootIno)
	// Unreachable directories: reattach the top of each unreachable subtree.
	var incoming map[uint64][]entryRef
	for _, d := range s.itab.all() {
		if !d.IsDir() || f.visited[d.attr.Ino] {
			continue
		}
		if incoming == nil {
			incoming = f.unvisitedRefs()
		}
		ino := d.attr.Ino
		if len(incoming[ino]) == 0 && d.attr.Nlink == 0 && len(d.dir) == 0 {
			continue // orphan: counted below
		}
		top := f.subtreeTop(d, incoming)
		if f.problem(true, "directory %d is not reachable from the root: moved to /lost+found", top.attr.Ino) {
			for _, r := range incoming[top.attr.Ino] {
				delete(s.itab.get(r.dir).dir, r.name)
			}
			lf := f.lostFound()
			lf.dir[f.lfName(lf, top.attr.Ino)] = top.attr.Ino
			f.walk(top, lf.attr.Ino)
		} else {
			f.walk(top, top.attr.Parent)
		}
		incoming = nil
	}
	// Unreachable files and other non-directories.
	incoming = f.unvisitedRefs()
	for _, in := range s.itab.all() {
		ino := in.attr.Ino
		if in.IsDir() || f.visited[ino] {
			continue
		}
		if len(incoming[ino]) > 0 {
			continue // only in a directory that stayed unreachable (no repair)
		}
		if in.attr.Nlink == 0 {
			continue // orphan
		}
		if f.problem(true, "inode %d has %d links but no directory entry: moved to /lost+found", ino, in.attr.Nlink) {
			lf := f.lostFound()
			lf.dir[f.lfName(lf, ino)] = ino
			f.visited[ino] = true
		}
	}
	// Parent pointers of reachable directories.
	for _, d := range s.itab.all() {
		ino := d.attr.Ino
		p, ok := f.treeParent[ino]
		if !d.IsDir() || !ok {
			continue
		}
		if d.attr.Parent != p {
			if f.problem(true, "directory %d parent pointer is %d, its entry is in %d", ino, d.attr.Parent, p) {
				d.attr.Parent = p
			}
		}
	}
}

// entryRef names one directory entry.
type entryRef struct {
	dir  uint64
	name string
}

// unvisitedRefs lists, per inode, the entries of unreachable directories
// that point at it.
func (f *fsck) unvisitedRefs() map[uint64][]entryRef {
	out := map[uint64][]entryRef{}
	for _, d := range f.s.itab.all() {
		if f.visited[d.attr.Ino] {
			continue
		}
		for _, name := range sortedNames(d.dir) {
			ino := d.dir[name]
			out[ino] = append(out[ino], entryRef{d.attr.Ino, name})
		}
	}
	return out
}

// subtreeTop climbs from the unreachable directory d through unreachable
// directories holding an entry for it (its recorded parent first) to the
// top of its subtree, stopping where a cycle closes.
func (f *fsck) subtreeTop(d *Inode, incoming map[uint64][]entryRef) *Inode {
	seen := map[uint64]bool{}
	cur := d
	for {
		seen[cur.attr.Ino] = true
		refs := incoming[cur.attr.Ino]
		var up *Inode
		for _, r := range refs {
			if p := f.s.itab.get(r.dir); p != nil && (up == nil || r.dir == cur.attr.Parent) {
				up = p
			}
		}
		if up == nil || seen[up.attr.Ino] || up == cur {
			return cur
		}
		cur = up
	}
}

// walk marks everything under dir (whose entry is in parent) reachable.
// A directory found a second time has an extra entry (a directory hard
// link, or a cycle): the extra entry is dropped.
func (f *fsck) walk(dir *Inode, parent uint64) {
	s := f.s
	f.visited[dir.attr.Ino] = true
	f.treeParent[dir.attr.Ino] = parent
	queue := []*Inode{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		for _, name := range sortedNames(d.dir) {
			c := s.itab.get(d.dir[name])
			if c == nil {
				continue
			}
			ino := c.attr.Ino
			if !c.IsDir() {
				f.visited[ino] = true
				continue
			}
			if f.visited[ino] {
				if f.problem(true, "directory %d has an extra entry %q in directory %d: entry dropped", ino, name, d.attr.Ino) {
					delete(d.dir, name)
				}
				continue
			}
			f.visited[ino] = true
			f.treeParent[ino] = d.attr.Ino
			queue = append(queue, c)
		}
	}
}

// lostFound returns /lost+found, making it when needed (repair only).
func (f *fsck) lostFound() *Inode {
	if f.lf != nil {
		return f.lf
	}
	s := f.s
	root := s.itab.get(RootIno)
	name := "lost+found"
	for i := 1; ; i++ {
		ino, ok := root.dir[name]
		if !ok {
			break
		}
		if c := s.itab.get(ino); c != nil && c.IsDir() && f.visited[ino] {
			f.lf = c
			return c
		}
		name = fmt.Sprintf("lost+found.%d", i)
	}
	t := now()
	lfIno, err := s.newIno(root, true)
	if err != nil {
		return root // no number left for lost+found: the root takes them
	}
	lf := &Inode{attr: format.InodeRec{Ino: lfIno, Mode: syscall.S_IFDIR | 0o700, Nlink: 2,
		Atime: t, Mtime: t, Ctime: t, Btime: t, Parent: RootIno}, dir: make(map[string]uint64)}
	s.itab.put(lf)
	root.dir[name] = lf.attr.Ino
	f.visited[lf.attr.Ino] = true
	f.treeParent[lf.attr.Ino] = RootIno
	f.note("made /%s", name)
	f.lf = lf
	return lf
}

// lfName is a free name for inode ino in lost+found.
func (f *fsck) lfName(lf *Inode, ino uint64) string {
	name := fmt.Sprintf("#%d", ino)
	for i := 1; ; i++ {
		if _, ok := lf.dir[name]; !ok {
			return name
		}
		name = fmt.Sprintf("#%d.%d", ino, i)
	}
}

// checkLinks compares link counts with the entries found: a directory has
// 2 + its subdirectories, anything else one per entry. Unlinked inodes
// (no entry, link count 0) are orphans, freed by the next mount.
func (f *fsck) checkLinks() {
	s := f.s
	refs := map[uint64]uint32{}
	subdirs := map[uint64]uint32{}
	for _, d := range s.itab.all() {
		if !f.visited[d.attr.Ino] {
			continue
		}
		for _, ino := range d.dir {
			c := s.itab.get(ino)
			if c == nil {
				continue
			}
			refs[ino]++
			if c.IsDir() {
				subdirs[d.attr.Ino]++
			}
		}
	}
	for _, in := range s.itab.all() {
		ino := in.attr.Ino
		if !f.visited[ino] {
			if in.attr.Nlink == 0 {
				f.rep.Orphans++
			}
			continue
		}
		want := refs[ino]
		if in.IsDir() {
			want = 2 + subdirs[ino]
		}
		if in.attr.Nlink != want {
			if f.problem(true, "inode %d link count %d, should be %d", ino, in.attr.Nlink, want) {
				in.attr.Nlink = want
			}
		}
	}
	if f.rep.Orphans > 0 {
		f.note("%d unlinked inodes (orphans) are freed by the next mount", f.rep.Orphans)
	}
}

// checkAGs checks the inode-number allocator against the inodes.
func (f *fsck) checkAGs() {
	s := f.s
	for _, in := range s.itab.all() {
		ag, agino := alloc.InoAG(in.attr.Ino), alloc.InoAGino(in.attr.Ino)
		if ag >= uint32(len(s.agNext)) {
			f.problem(false, "inode %d in AG %d beyond the AG count", in.attr.Ino, ag)
			continue
		}
		if s.agNext[ag].Load() <= agino {
			if f.problem(true, "AG %d next inode number %d, but inode %d exists", ag, s.agNext[ag].Load(), in.attr.Ino) {
				s.bumpAGNext(in.attr.Ino)
			}
		}
	}
	if r := s.rotor.Load(); r >= s.sb.AGCount {
		if f.problem(true, "directory rotor %d beyond the AG count %d", r, s.sb.AGCount) {
			s.rotor.Store(r % s.sb.AGCount)
		}
	}
}

// checkFree compares the allocator with what was marked used.
func (f *fsck) checkFree() {
	s := f.s
	sb := s.sb
	if err := s.alloc.Check(); err != nil {
		f.problem(false, "free space index: %v", err)
	}
	var mapped uint64
	for _, in := range s.itab.all() {
		mapped += in.ext.blocks()
	}
	if f.repair && mapped != f.rep.UsedBlocks {
		f.problem(false, "files map %d blocks after repair, %d are accounted used", mapped, f.rep.UsedBlocks)
	}
	dataBlocks := sb.BackupBlock - sb.MetaEnd()
	f.rep.FreeBlocks = s.alloc.FreeBlocks()
	if f.rep.UsedBlocks > dataBlocks || f.rep.FreeBlocks != dataBlocks-f.rep.UsedBlocks {
		f.problem(false, "free space: %d blocks free, %d data blocks with %d used", f.rep.FreeBlocks, dataBlocks, f.rep.UsedBlocks)
	}
}

func sortedNames(m map[string]uint64) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

package meta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

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
	open := func() *Store {
		s := newStore(dev, sb, Options{Logger: log}, !opts.Repair)
		f.s = s
		s.check = f
		return s
	}
	s := open()
	defer func() { f.s.closeCaches() }()
	h, commits, _, err := s.load(true)
	if err != nil && opts.Repair && errors.Is(err, format.ErrCorrupt) {
		// A tree node on the way of the load does not verify: start
		// again from the checkpoint, rebuilding the damaged trees.
		s.closeCaches()
		rep.Problems, rep.Fixed, f.badHeader, f.badCommitSeen = nil, 0, nil, false
		s = open()
		h, commits, err = f.loadDamaged(err)
	}
	if err != nil {
		// Without readable trees there is nothing to repair from.
		hint := ""
		if !opts.Repair && errors.Is(err, format.ErrCorrupt) {
			hint = " (fsck -y rebuilds damaged trees from what is readable)"
		}
		f.problem(false, "loading metadata: %v%s", err, hint)
		return rep, nil
	}
	rep.Checkpoint, rep.ReplayedCommits = h.Seq, commits
	if s.found != nil && s.found.Damage != nil {
		if s.j.Interrupted(s.found) {
			f.rep.Notes = append(f.rep.Notes, fmt.Sprintf("a checkpoint was interrupted (%v); the checkpoint in use and the journal hold everything, and the next checkpoint rewrites the slot", s.found.Damage))
		} else {
			f.problem(false, "%v", s.found.Damage)
		}
	}
	f.checkTrees()
	if !opts.Repair || rep.Fixed == 0 {
		return rep, nil
	}
	if rep.Fixed < len(rep.Problems) {
		f.withdraw()
		return rep, nil
	}
	if writeSuper {
		if err := WriteSuper(dev, sb); err != nil {
			return nil, fmt.Errorf("rewriting superblocks: %w", err)
		}
	}
	if f.badCommitSeen {
		// The commits after the bad one are still in the journal: start the
		// sequence far beyond them so replay never reaches any of them.
		s.j.SkipSeq(1 << 32)
		f.fixes++
	}
	if f.fixes > 0 {
		if err := s.checkpoint(); err != nil {
			return nil, fmt.Errorf("writing repaired checkpoint: %w", err)
		}
	}
	rep.Wrote = true
	return rep, nil
}

// fsck is one check run over a loaded Store.
type fsck struct {
	s      *Store
	rep    *FsckReport
	repair bool
	fixes  int // repairs that need a checkpoint
	// badHeader lists the AGs whose header was missing or malformed.
	badHeader []int
	// badCommitSeen: the journal ends before a commit that does not decode.
	badCommitSeen bool
}

var _ checker = (*fsck)(nil)

func (f *fsck) badCommit(err error) {
	f.badCommitSeen = f.problem(true, "%v: the journal ends before it", err)
}

func (f *fsck) badAGHeader(ag int, err error) {
	f.badHeader = append(f.badHeader, ag)
	f.problem(true, "%v: counters recounted from the tree", err)
}

func (f *fsck) beforeReplay() { f.reserveInUse() }

// withdraw takes back the repairs of a -y run that leaves a problem it
// cannot repair: nothing is written. A checkpoint built over such a
// problem (blocks two owners claim, a tree that does not verify) could
// place repaired metadata over data that is still in use, and would hide
// the damage from the next run; the report keeps every problem and exits 4.
func (f *fsck) withdraw() {
	withdrawn := 0
	for i, p := range f.rep.Problems {
		if m, ok := strings.CutSuffix(p, " (fixed)"); ok {
			f.rep.Problems[i] = m + " (repairable, not written)"
			withdrawn++
		}
	}
	f.rep.Fixed = 0
	f.rep.Notes = append(f.rep.Notes, fmt.Sprintf("nothing written: %d problems cannot be repaired automatically, so the %d repairs found were not applied",
		len(f.rep.Problems)-withdrawn, withdrawn))
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

// owner is one user of a device block range, for the overlap check.
type owner struct {
	start, n uint64
	what     string
}

// checkTrees checks every AG tree's structure (checksums, key order,
// sibling and parent keys, levels), then what the keys say: inodes,
// directory entries (they point at inodes, each directory reachable from
// the root once, parent pointers), link counts, block counts, extents
// (inside the data area) and free space (every block of the data area is
// exactly one of: free, a tree node, a file's extent) and the AG counters
// (fsckcount.go). With -y, damaged trees are rebuilt first
// (fscksalvage.go), then link and block counts, dangling entries, lost
// inodes (to lost+found), free space and AG counters are repaired.
func (f *fsck) checkTrees() {
	s := f.s
	// Attributes replay left in memory go into the trees first, as a
	// checkpoint would put them.
	for _, in := range s.clearDirty() {
		if !in.freed {
			if err := s.applyInode(&in.attr); err != nil {
				f.problem(false, "inode %d: %v", in.attr.Ino, err)
			}
		}
	}
	// Replay in memory moved tree nodes: account for them as a checkpoint would.
	if _, err := s.foldNodeSpace(); err != nil {
		f.problem(false, "tree node space: %v", err)
	}
	if f.repair {
		f.salvageTrees()
	}
	type inodeInfo struct {
		a       format.InodeRec
		links   uint32 // entries pointing here
		subdirs uint32
		blocks  uint64
		parents []uint64
	}
	inodes := map[uint64]*inodeInfo{}
	type dirent struct {
		dir, ino uint64
		name     string
	}
	var dirents []dirent
	var owners []owner
	orphans := map[uint64]bool{}
	counts := make([]agCount, len(s.trees))
	freeBad := false // a free-space record is malformed or misplaced
	for ag, t := range s.trees {
		cnt := &counts[ag]
		for _, err := range t.Check(func(blk uint64, level int) {
			owners = append(owners, owner{blk, 1, fmt.Sprintf("AG %d tree node", ag)})
		}) {
			f.problem(false, "AG %d tree: %v", ag, err)
		}
		var extents []struct {
			ino uint64
			e   Extent
		}
		err := t.Ascend(nil, func(k, v []byte) bool {
			switch {
			case len(k) > 0 && k[0] == format.KeyFreeSpc:
				fs, fn, err := format.DecodeFree(k, v)
				if err != nil {
					freeBad = true
					f.problem(true, "AG %d: %v", ag, err)
					return true
				}
				owners = append(owners, owner{fs, fn, freeSpace})
				if s.agOfBlock(fs) != uint32(ag) || s.agOfBlock(fs+fn-1) != uint32(ag) {
					freeBad = true
					f.problem(true, "free extent %d+%d recorded in AG %d's tree", fs, fn, ag)
				}
			case len(k) == 10 && k[0] == format.KeyAG && bytes.HasPrefix(k, format.OrphanPrefix()):
				orphans[binary.BigEndian.Uint64(k[2:])] = true
			case len(k) > 0 && k[0] == format.KeyAG:
				cnt.agKey(ag, k, v)
			case len(k) > 0 && k[0] == format.KeyInoSpc:
				ino, kind, _, err := format.InoKey(k)
				if err != nil {
					f.problem(false, "AG %d: %v", ag, err)
					return true
				}
				if alloc.InoAG(ino) != uint32(ag) {
					f.problem(false, "inode %d's metadata in AG %d's tree", ino, ag)
				}
				switch kind {
				case format.KindInode:
					a, err := format.DecodeInodeVal(v)
					if err != nil || a.Ino != ino || !validType(a.Mode) {
						f.problem(false, "inode %d: bad record (%v)", ino, err)
						return true
					}
					inodes[ino] = &inodeInfo{a: a}
					cnt.inode(&a)
				case format.KindExtent:
					e, err := decodeExtent(k, v)
					if err != nil {
						f.problem(false, "inode %d: %v", ino, err)
						return true
					}
					extents = append(extents, struct {
						ino uint64
						e   Extent
					}{ino, e})
				case format.KindDirent:
					name, _, child, _, err := format.DecodeDirent(k, v)
					if err != nil {
						f.problem(false, "directory %d: %v", ino, err)
						return true
					}
					dirents = append(dirents, dirent{ino, child, name})
				case format.KindTarget, format.KindXattr:
				default:
					cnt.unknownKey(k)
				}
			default:
				cnt.unknownKey(k)
			}
			return true
		})
		if err != nil {
			f.problem(false, "AG %d: reading tree: %v", ag, err)
			continue
		}
		for _, x := range extents {
			in := inodes[x.ino]
			if in == nil {
				if f.problem(true, "extent %d+%d of missing inode %d: dropped", x.e.LBlk, x.e.Len, x.ino) {
					if _, err := t.Delete(format.ExtentKey(x.ino, x.e.LBlk)); err != nil {
						f.problem(false, "dropping extent of inode %d: %v", x.ino, err)
					}
					f.fixes++
				}
				continue
			}
			if x.e.PBlk < s.sb.MetaEnd() || x.e.PBlk+x.e.Len > s.sb.BackupBlock {
				// As e2fsck clears illegal blocks: the file gets a hole
				// there, and its block count is fixed below.
				if f.problem(true, "inode %d extent %d+%d at block %d outside the data area: dropped", x.ino, x.e.LBlk, x.e.Len, x.e.PBlk) {
					if _, err := t.Delete(format.ExtentKey(x.ino, x.e.LBlk)); err != nil {
						f.problem(false, "dropping extent of inode %d: %v", x.ino, err)
					}
					f.fixes++
					continue
				}
				in.blocks += x.e.Len
				continue
			}
			in.blocks += x.e.Len
			owners = append(owners, owner{x.e.PBlk, x.e.Len, fmt.Sprintf("inode %d", x.ino)})
		}
	}
	f.checkSpace(owners, freeBad)
	f.checkCounters(counts)
	// Directory entries.
	tx := &txn{s: s}
	root := inodes[RootIno]
	switch {
	case root == nil:
		// Lost with a damaged node: made anew, as e2fsck does; entries
		// that survived in it are found again.
		if f.problem(true, "root directory missing: made anew") {
			now := time.Now().UnixNano()
			a := format.InodeRec{Ino: RootIno, Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Parent: RootIno, Gen: 1,
				Atime: now, Mtime: now, Ctime: now, Btime: now}
			tx.inode(&a)
			root = &inodeInfo{a: a}
			inodes[RootIno] = root
		}
	case root.a.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		f.problem(false, "root directory is not a directory")
	}
	for _, d := range dirents {
		dir, child := inodes[d.dir], inodes[d.ino]
		if dir == nil || dir.a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			if f.problem(true, "entry %q in %d, which is not a directory: dropped", d.name, d.dir) {
				if _, err := s.treeFor(d.dir).Delete(format.DirentKey(d.dir, d.name)); err != nil {
					f.problem(false, "dropping entry %q in %d: %v", d.name, d.dir, err)
				}
				f.fixes++
			}
			continue
		}
		if child == nil {
			if f.problem(true, "directory %d entry %q points at missing inode %d: dropped", d.dir, d.name, d.ino) {
				tx.unlink(d.dir, d.name)
			}
			continue
		}
		child.links++
		child.parents = append(child.parents, d.dir)
		if child.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			dir.subdirs++
		}
	}
	// Inodes no entry reaches (open-unlinked orphans aside).
	var homeless []uint64 // for lost+found
	for ino, in := range inodes {
		if ino == RootIno || in.links > 0 {
			continue
		}
		if orphans[ino] && in.a.Nlink == 0 {
			f.rep.Orphans++
			continue
		}
		if f.problem(true, "inode %d is not in any directory: moved to lost+found", ino) {
			homeless = append(homeless, ino)
		}
	}
	if len(homeless) > 0 {
		// As e2fsck: /lost+found (made if missing) gets an entry "#ino"
		// for every inode no entry reaches; link counts follow below.
		var lf uint64
		for _, d := range dirents {
			if c := inodes[d.ino]; d.dir == RootIno && d.name == "lost+found" && c != nil && c.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				lf = d.ino
			}
		}
		if lf == 0 {
			agino := max(s.agNext[0].Load(), uint32(RootIno)+1)
			for inodes[alloc.MakeIno(0, agino)] != nil {
				agino++
			}
			s.agNext[0].Store(agino + 1)
			lf = alloc.MakeIno(0, agino)
			now := time.Now().UnixNano()
			a := format.InodeRec{Ino: lf, Mode: syscall.S_IFDIR | 0o700, Nlink: 2, Parent: RootIno, Gen: newGen(),
				Atime: now, Mtime: now, Ctime: now, Btime: now}
			tx.inode(&a)
			tx.link(RootIno, lf, a.Mode, "lost+found")
			inodes[lf] = &inodeInfo{a: a, links: 1, parents: []uint64{RootIno}}
			if root != nil {
				root.subdirs++
			}
		}
		slices.Sort(homeless)
		for _, ino := range homeless {
			in := inodes[ino]
			tx.link(lf, ino, in.a.Mode, "#"+strconv.FormatUint(ino, 10))
			in.links++
			in.parents = append(in.parents, lf)
			if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				inodes[lf].subdirs++
				in.a.Parent = lf
				tx.inode(&in.a)
			}
		}
	}
	// Reachability: walk parents up to the root.
	for ino, in := range inodes {
		if ino == RootIno || len(in.parents) == 0 {
			continue
		}
		if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR && len(in.parents) > 1 {
			f.problem(false, "directory %d has %d entries", ino, len(in.parents))
		}
		seen := map[uint64]bool{ino: true}
		cur := in
		for steps := 0; ; steps++ {
			p := cur.parents[0]
			if p == RootIno {
				break
			}
			if seen[p] || inodes[p] == nil || len(inodes[p].parents) == 0 {
				f.problem(false, "inode %d is not reachable from the root (directory cycle or detached tree)", ino)
				break
			}
			seen[p] = true
			cur = inodes[p]
		}
		if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR && in.a.Parent != in.parents[0] {
			if f.problem(true, "directory %d's parent pointer is %d, its entry is in %d", ino, in.a.Parent, in.parents[0]) {
				in.a.Parent = in.parents[0]
				tx.inode(&in.a)
			}
		}
	}
	// Link and block counts.
	for ino, in := range inodes {
		want := in.links
		if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			want = 2 + in.subdirs
			if ino == RootIno {
				want = 2 + in.subdirs
			}
		}
		changed := false
		if in.a.Nlink != want && !(in.links == 0 && orphans[ino]) {
			if f.problem(true, "inode %d link count %d, counted %d", ino, in.a.Nlink, want) {
				in.a.Nlink, changed = want, true
			}
		}
		if in.a.Blocks != in.blocks {
			if f.problem(true, "inode %d block count %d, its extents map %d", ino, in.a.Blocks, in.blocks) {
				in.a.Blocks, changed = in.blocks, true
			}
		}
		if changed {
			tx.inode(&in.a)
		}
		f.rep.Inodes++
		switch in.a.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			f.rep.Dirs++
		case syscall.S_IFREG:
			f.rep.Files++
		}
	}
	for ino := range orphans {
		if in := inodes[ino]; in == nil || in.a.Nlink != 0 {
			f.problem(false, "orphan list names inode %d, which is not an unlinked inode", ino)
		}
	}
	if len(tx.e.Buf) > 0 {
		if tx.err != nil {
			f.problem(false, "repair failed: %v", tx.err)
			return
		}
		f.fixes++
	}
}

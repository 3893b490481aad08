package meta

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

func now() int64 { return time.Now().UnixNano() }

// Get returns the inode with number ino, or nil if there is none (or it
// cannot be read: that is logged).
func (s *Store) Get(ino uint64) *Inode {
	in, err := s.loadInode(ino)
	if err != nil {
		s.log.Error("reading inode", zap.Uint64("ino", ino), zapErr(err))
		return nil
	}
	return in
}

// load returns the live Inode of ino, reading it from its tree if needed;
// nil, nil when it does not exist.
func (s *Store) loadInode(ino uint64) (*Inode, error) {
	if ino == 0 || alloc.InoAG(ino) >= s.sb.AGCount {
		return nil, nil
	}
	if in := s.itab.get(ino); in != nil {
		return in, nil
	}
	t := s.treeFor(ino)
	v, ok, err := t.Get(format.InodeKey(ino))
	if err != nil || !ok {
		return nil, treeErr(err)
	}
	a, err := format.DecodeInodeVal(v)
	if err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	if a.Ino != ino {
		return nil, fmt.Errorf("inode %d stored as %d: %w", ino, a.Ino, format.ErrCorrupt)
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		tgt, _, err := getChunks(t, format.InoKindPrefix(ino, format.KindTarget), format.MaxTargetLen)
		if err != nil {
			return nil, fmt.Errorf("inode %d target: %w", ino, err)
		}
		a.Target = string(tgt)
	}
	return s.itab.getOrPut(&Inode{attr: a}), nil
}

// Root returns the root directory.
func (s *Store) Root() *Inode { return s.Get(RootIno) }

// dirLookup finds name in dir's entries.
func (s *Store) dirLookup(dir *Inode, name string) (ino uint64, ok bool, err error) {
	v, ok, err := s.treeFor(dir.attr.Ino).Get(format.DirentKey(dir.attr.Ino, name))
	if err != nil || !ok {
		return 0, false, treeErr(err)
	}
	if len(v) != 12 {
		return 0, false, fmt.Errorf("directory %d entry %q: %w", dir.attr.Ino, name, format.ErrCorrupt)
	}
	return le64(v), true, nil
}

// dirEmpty reports a directory without entries.
func (s *Store) dirEmpty(dir *Inode) (bool, error) {
	prefix := format.InoKindPrefix(dir.attr.Ino, format.KindDirent)
	empty := true
	err := s.treeFor(dir.attr.Ino).Ascend(prefix, func(k, v []byte) bool {
		empty = !bytes.HasPrefix(k, prefix)
		return false
	})
	return empty, treeErr(err)
}

// Lookup finds name in directory dir.
func (s *Store) Lookup(dir *Inode, name string) (*Inode, error) {
	if len(name) > format.MaxNameLen {
		return nil, syscall.ENAMETOOLONG
	}
	ino, ok, err := s.dirLookup(dir, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, syscall.ENOENT
	}
	in, err := s.loadInode(ino)
	if err != nil {
		return nil, err
	}
	if in == nil {
		return nil, syscall.ENOENT
	}
	return in, nil
}

// DirEntry is one readdir result.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // type bits only
	Off  uint64 // readdir offset (format.DirHash of the name)
}

// Readdir lists dir in hash order; Off is each entry's stable offset.
func (s *Store) Readdir(dir *Inode) ([]DirEntry, error) {
	out, _, err := s.ReaddirFrom(dir, 0, -1)
	return out, err
}

// ReaddirFrom lists up to max entries (max < 0: all) of dir whose offset
// is at least off, in offset order, and says whether more follow.
func (s *Store) ReaddirFrom(dir *Inode, off uint64, max int) ([]DirEntry, bool, error) {
	if !dir.IsDir() {
		return nil, false, syscall.ENOTDIR
	}
	prefix := format.InoKindPrefix(dir.attr.Ino, format.KindDirent)
	var out []DirEntry
	var derr error
	more := false
	err := s.treeFor(dir.attr.Ino).Ascend(format.DirentHashKey(dir.attr.Ino, off), func(k, v []byte) bool {
		if !bytes.HasPrefix(k, prefix) {
			return false
		}
		if max >= 0 && len(out) >= max {
			more = true
			return false
		}
		name, h, ino, mode, err := format.DecodeDirent(k, v)
		if err != nil {
			derr = fmt.Errorf("directory %d: %w", dir.attr.Ino, err)
			return false
		}
		out = append(out, DirEntry{Name: name, Ino: ino, Mode: mode, Off: h})
		return true
	})
	if err == nil {
		err = derr
	}
	return out, more, treeErr(err)
}

// NewInode describes an inode to create.
type NewInode struct {
	Mode     uint32 // type and permission bits
	UID, GID uint32
	Rdev     uint32
	Target   string // symlinks
	// RuleStream is the stream a stream rule gives the name (0: no rule
	// matched). It wins over the directory's stream; an explicit SET later
	// wins over both.
	RuleStream uint32
	// Umask is the creator's umask, applied here with Options.ACL (a
	// default ACL replaces it); without, the kernel has applied it.
	Umask uint32
}

// newIno picks the number for a new inode: files live in their parent's
// AG, directories rotate across AGs (as XFS places them).
func (s *Store) newIno(parent *Inode, isDir bool) (uint64, error) {
	ag := alloc.InoAG(parent.attr.Ino)
	if isDir {
		for {
			r := s.rotor.Load()
			if s.rotor.CompareAndSwap(r, (r+1)%s.sb.AGCount) {
				ag = r % s.sb.AGCount
				break
			}
		}
	}
	// Numbers are never reused; an AG whose 32-bit counter is spent passes
	// the inode to the next AG, and only when all are spent is it ENOSPC.
	for i := uint32(0); i < s.sb.AGCount; i++ {
		a := (ag + i) % s.sb.AGCount
		for {
			cur := s.agNext[a].Load()
			if cur == ^uint32(0) {
				break // spent: the next would wrap onto 0 and the root
			}
			if s.agNext[a].CompareAndSwap(cur, cur+1) {
				ino := alloc.MakeIno(a, cur)
				if ino <= RootIno {
					continue
				}
				// A damaged counter must not hand out a live number.
				if _, used, err := s.treeFor(ino).Get(format.InodeKey(ino)); err != nil {
					return 0, treeErr(err)
				} else if !used {
					return ino, nil
				}
			}
		}
	}
	return 0, syscall.ENOSPC
}

// Create makes a file, directory, symlink or device node in dir. The new
// inode takes n.RuleStream if a rule matched, else the directory's stream.
func (s *Store) Create(dir *Inode, name string, n NewInode) (*Inode, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	if len(n.Target) > format.MaxTargetLen {
		return nil, syscall.ENAMETOOLONG
	}
	isDir := n.Mode&syscall.S_IFMT == syscall.S_IFDIR
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if !dir.IsDir() || dir.freed {
		return nil, syscall.ENOENT
	}
	if _, ok, err := s.dirLookup(dir, name); err != nil {
		return nil, err
	} else if ok {
		return nil, syscall.EEXIST
	}
	acls, err := s.inheritACL(dir, &n)
	if err != nil {
		return nil, err
	}
	ino, err := s.newIno(dir, isDir)
	if err != nil {
		return nil, err
	}
	t := now()
	in := &Inode{attr: format.InodeRec{
		Ino: ino, Mode: n.Mode, UID: n.UID, GID: n.GID, Rdev: n.Rdev,
		Nlink: 1, Atime: t, Mtime: t, Ctime: t, Btime: t,
		Target: n.Target, Parent: dir.attr.Ino, Gen: newGen(),
	}}
	// An explicit rule beats inheritance from the directory.
	switch {
	case n.RuleStream != 0:
		in.attr.Stream, in.attr.StreamSrc = n.RuleStream, format.StreamSrcRule
	case dir.attr.Stream != 0:
		in.attr.Stream, in.attr.StreamSrc = dir.attr.Stream, format.StreamSrcDir
	}
	if n.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		in.attr.Size = uint64(len(n.Target))
	}
	// setgid directories pass their group on, as on every Unix filesystem.
	if dir.attr.Mode&syscall.S_ISGID != 0 {
		in.attr.GID = dir.attr.GID
		if isDir {
			in.attr.Mode |= syscall.S_ISGID
		}
	}
	if isDir {
		in.attr.Nlink = 2
	}
	ops := 2*opsInode + opsEntry + len(n.Target)/format.ChunkBytes + 1
	for _, v := range acls {
		ops += s.valueOps(len(v))
	}
	tx, err := s.beginOp(ops, spaceGrow)
	if err != nil {
		return nil, err
	}
	defer tx.end()
	// A lookup by number (a file handle) finds the inode once it is
	// published: locked until its records are journaled, nothing can
	// change it before its creation. Nobody else can hold it yet, so the
	// lock order does not apply.
	in.mu.Lock()
	defer in.mu.Unlock()
	s.itab.put(in)
	if testHookCreate != nil {
		testHookCreate(ino)
	}
	if isDir {
		dir.attr.Nlink++
	}
	dir.attr.Mtime, dir.attr.Ctime = t, t
	tx.inode(&in.attr)
	for _, k := range []string{XattrACLAccess, XattrACLDefault} {
		if v, ok := acls[k]; ok {
			tx.xattr(in.attr.Ino, k, v)
		}
	}
	tx.link(dir.attr.Ino, in.attr.Ino, in.attr.Mode, name)
	tx.inode(&dir.attr)
	if err := tx.commit(); err != nil {
		return nil, err
	}
	return in, nil
}

// Link adds a hard link to in in dir.
func (s *Store) Link(dir *Inode, name string, in *Inode) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	if in.IsDir() {
		return syscall.EPERM
	}
	unlock := lockInodes(dir, in)
	defer unlock()
	if !dir.IsDir() || dir.freed || in.freed {
		return syscall.ENOENT
	}
	if in.attr.Nlink == 0 {
		return syscall.ENOENT
	}
	if in.attr.Nlink >= 65000 {
		return syscall.EMLINK
	}
	if _, ok, err := s.dirLookup(dir, name); err != nil {
		return err
	} else if ok {
		return syscall.EEXIST
	}
	tx, err := s.beginOp(2*opsInode+opsEntry, spaceGrow)
	if err != nil {
		return err
	}
	defer tx.end()
	t := now()
	in.attr.Nlink++
	in.attr.Ctime = t
	dir.attr.Mtime, dir.attr.Ctime = t, t
	tx.link(dir.attr.Ino, in.attr.Ino, in.attr.Mode, name)
	tx.inode(&in.attr)
	tx.inode(&dir.attr)
	return tx.commit()
}

// lockEntry locks dir and the inode its entry name points at (in inode
// order), retrying if the entry changes meanwhile; unlockEntry(dir, child)
// unlocks them. child is nil when the entry does not exist; then only dir
// is locked.
func (s *Store) lockEntry(dir *Inode, name string) (child *Inode, err error) {
	// Entries change only under their directory's lock, so with dir locked
	// first one lookup is final, as long as the child may be locked after
	// dir: a higher inode number, as for the files created in dir (they take
	// the next numbers of its AG).
	dir.mu.Lock()
	ino, ok, err := s.dirLookup(dir, name)
	if err == nil && ok && ino > dir.attr.Ino {
		child, err = s.loadInode(ino)
	}
	switch {
	case err != nil:
		dir.mu.Unlock()
		return nil, err
	case !ok:
		return nil, nil
	case child != nil:
		child.mu.Lock()
		return child, nil
	}
	dir.mu.Unlock()
	for {
		ino, ok, err := s.dirLookup(dir, name)
		if err != nil {
			return nil, err
		}
		child = nil
		if ok {
			if child, err = s.loadInode(ino); err != nil {
				return nil, err
			}
		}
		unlock := lockInodes(dir, child)
		ino2, ok2, err := s.dirLookup(dir, name)
		if err != nil {
			unlock()
			return nil, err
		}
		if ok == ok2 && (!ok || ino2 == ino) {
			return child, nil
		}
		unlock()
	}
}

// unlockEntry unlocks what lockEntry locked.
func unlockEntry(dir, child *Inode) {
	if child != nil && child != dir {
		child.mu.Unlock()
	}
	dir.mu.Unlock()
}

// checkName refuses names no directory may hold.
func checkName(name string) error {
	if len(name) > format.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	if !format.ValidName(name) {
		return syscall.EINVAL
	}
	return nil
}

// Remove unlinks name from dir; rmdir selects directories only.
func (s *Store) Remove(dir *Inode, name string, rmdir bool) error {
	if err := s.writable(); err != nil {
		return err
	}
	if len(name) > format.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	if !dir.IsDir() {
		return syscall.ENOTDIR
	}
	child, err := s.lockEntry(dir, name)
	if err != nil {
		return err
	}
	defer unlockEntry(dir, child)
	if child == nil {
		return syscall.ENOENT
	}
	if rmdir && !child.IsDir() {
		return syscall.ENOTDIR
	}
	if !rmdir && child.IsDir() {
		return syscall.EISDIR
	}
	if rmdir {
		if empty, err := s.dirEmpty(child); err != nil {
			return err
		} else if !empty {
			return syscall.ENOTEMPTY
		}
	}
	dropOps, big, err := s.dropLinkCost(child)
	if err != nil {
		return err
	}
	tx, err := s.beginOp(opsEntry+opsInode+dropOps, spacePool)
	if err != nil {
		return err
	}
	t := now()
	dir.attr.Mtime, dir.attr.Ctime = t, t
	tx.unlink(dir.attr.Ino, name)
	orphan := s.dropLinkLocked(child, dir, t, tx, big)
	tx.inode(&dir.attr)
	err = tx.commit()
	tx.end()
	// As in mapLocked: commit copied the records out, so rm -rf reuses
	// one transaction instead of leaving one to the collector per file.
	txnPool.Put(tx)
	if err == nil && orphan {
		s.freeLater(child)
	}
	return err
}

// dropLinkLocked removes one link of child (whose entry in dir is already
// gone) and frees it when nothing references it any more — in tx unless
// big (dropLinkCost): then it only becomes an orphan, and the caller frees
// it after the commit with freeLater. child and dir are locked, opLock is
// held shared.
func (s *Store) dropLinkLocked(child, dir *Inode, t int64, tx *txn, big bool) (orphan bool) {
	if child.IsDir() {
		child.attr.Nlink = 0
		dir.attr.Nlink--
	} else if child.attr.Nlink > 0 {
		child.attr.Nlink--
	}
	child.attr.Ctime = t
	if child.attr.Nlink == 0 && child.opens == 0 && !big {
		s.freeInodeLocked(child, tx)
		return false
	}
	tx.inode(&child.attr)
	return child.attr.Nlink == 0 && child.opens == 0
}

// dropLinkCost is the size of dropLinkLocked's part of a transaction for
// child, and whether child is too big to be freed within it. child.mu is
// held.
func (s *Store) dropLinkCost(child *Inode) (ops int, big bool, err error) {
	if child.opens > 0 || (!child.IsDir() && child.attr.Nlink > 1) {
		return opsInode, false, nil
	}
	ops, big, err = s.freeCost(child)
	if big {
		ops = opsInode
	}
	return ops, big, err
}

// freeInline is how many extents a file may have to be freed within the
// operation that drops its last reference; a file with more is freed a few
// extents at a time (punchLocked), as XFS frees a large file in a chain
// of transactions after its unlink: each step finds room on a full device.
const freeInline = 4

// freeCost is the size of freeing in in one transaction: its keys are
// neighbours (inode, extents, xattrs, symlink target), deleted as one
// range, and each extent changes its AG's free-space records. big says in
// has more than freeInline extents. in.mu is held.
func (s *Store) freeCost(in *Inode) (ops int, big bool, err error) {
	prefix := format.InoPrefix(in.attr.Ino)
	size, exts := 0, 0
	var derr error
	err = s.treeFor(in.attr.Ino).Ascend(prefix, func(k, v []byte) bool {
		if len(k) <= len(prefix) || !bytes.HasPrefix(k, prefix) {
			return false
		}
		if k[len(prefix)] == format.KindExtent {
			exts++
			// A damaged extent is refused here, before the operation
			// changes anything, rather than half-way through its apply.
			e, err := decodeExtent(k, v)
			if err == nil {
				err = s.checkExtents(in.attr.Ino, []Extent{e})
			}
			if err != nil {
				derr = err
				return false
			}
		}
		size += len(k) + len(v) + 4
		return exts <= freeInline
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return 0, false, treeErr(err)
	}
	return 1 + s.valueOps(size) + exts*opsPerFree, exts > freeInline, nil
}

// extentsFrom counts in's extents that reach past file block from and
// start before end, up to max, and returns the last one counted.
func (s *Store) extentsFrom(in *Inode, from, end uint64, max int) (n int, last Extent, err error) {
	var derr error
	err = ascendExtentsLE(s.treeFor(in.attr.Ino), in.attr.Ino, from, func(e Extent) bool {
		if e.LBlk >= end {
			return false
		}
		if e.End() > from {
			// Checked before the punch that frees it, not inside it.
			if derr = s.checkExtents(in.attr.Ino, []Extent{e}); derr != nil {
				return false
			}
			last = e
			n++
		}
		return n < max
	})
	if err == nil {
		err = derr
	}
	return n, last, treeErr(err)
}

// freeOrphanLocked frees in, which has no links and no open handles: its
// extents first when it has many. in.mu is held, opLock is not.
func (s *Store) freeOrphanLocked(in *Inode) error {
	if in.freed {
		return nil
	}
	ops, big, err := s.freeCost(in)
	if err != nil {
		return err
	}
	if big {
		if err := s.punchLocked(in, 0, ^uint64(0)); err != nil {
			return err
		}
		if ops, _, err = s.freeCost(in); err != nil {
			return err
		}
	}
	tx, err := s.beginOp(ops, spacePool)
	if err != nil {
		return err
	}
	defer tx.end()
	s.freeInodeLocked(in, tx)
	return tx.commit()
}

// freeLater frees an orphan an operation left (its name is gone, durably
// once committed): a failure only delays it to the next mount, which frees
// orphans. in.mu is held.
func (s *Store) freeLater(in *Inode) {
	if err := s.freeOrphanLocked(in); err != nil {
		s.log.Warn("freeing an unlinked file failed; the next mount frees it", zap.Uint64("ino", in.attr.Ino), zapErr(err))
	}
}

// freeInodeLocked deletes in; its blocks are freed after the commit.
func (s *Store) freeInodeLocked(in *Inode, tx *txn) {
	in.freed = true
	tx.free(in.attr.Ino)
	if in.dirty {
		in.dirty = false
		s.dirtyMu.Lock()
		delete(s.dirty, in)
		s.dirtyCount.Store(int64(len(s.dirty)))
		s.dirtyMu.Unlock()
	}
}

// OpenFile counts an open handle: an unlinked file lives until the last
// close. A file already freed (reopened through an O_PATH descriptor, say)
// cannot be opened again: ESTALE.
func (s *Store) OpenFile(in *Inode) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ESTALE
	}
	in.opens++
	return nil
}

// Release drops an open handle and frees an unlinked file at the last close.
func (s *Store) Release(in *Inode) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.opens--
	if in.opens > 0 || in.attr.Nlink > 0 || in.freed || s.ReadOnly() {
		return
	}
	s.freeLater(in)
}

// isAncestor reports whether a is dir or one of its ancestors. renameMu held.
func (s *Store) isAncestor(a, dir *Inode) bool {
	// The walk is bounded: a parent cycle on a damaged image must not hang
	// rename (it is refused instead; fsck repairs the cycle).
	seen := map[uint64]bool{}
	for cur := dir; ; {
		if seen[cur.attr.Ino] {
			return true
		}
		seen[cur.attr.Ino] = true
		if cur == a {
			return true
		}
		if cur.attr.Ino == RootIno {
			return false
		}
		p := s.Get(cur.attr.Parent)
		if p == nil || p == cur {
			return false
		}
		cur = p
	}
}

// Rename flags (renameat2).
const (
	RenameNoReplace = 1
	RenameExchange  = 2
)

// Rename moves oldDir/oldName to newDir/newName.
func (s *Store) Rename(oldDir *Inode, oldName string, newDir *Inode, newName string, flags uint32) error {
	if err := s.writable(); err != nil {
		return err
	}
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	if len(oldName) > format.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	if err := checkName(newName); err != nil {
		return err
	}
	// Directory moves between directories take renameMu so the ancestor
	// check below sees a stable tree (the kernel's s_vfs_rename_mutex).
	if oldDir != newDir {
		s.renameMu.Lock()
		defer s.renameMu.Unlock()
	}
	if !oldDir.IsDir() || !newDir.IsDir() {
		return syscall.ENOTDIR
	}
	for {
		srcIno, ok, err := s.dirLookup(oldDir, oldName)
		if err != nil {
			return err
		}
		if !ok {
			return syscall.ENOENT
		}
		dstIno, dstOK, err := s.dirLookup(newDir, newName)
		if err != nil {
			return err
		}
		src, err := s.loadInode(srcIno)
		if err != nil {
			return err
		}
		var dst *Inode
		if dstOK {
			if dst, err = s.loadInode(dstIno); err != nil {
				return err
			}
		}
		if src == nil {
			return syscall.ENOENT
		}
		unlock := lockInodes(oldDir, newDir, src, dst)
		i1, ok1, err1 := s.dirLookup(oldDir, oldName)
		i2, ok2, err2 := s.dirLookup(newDir, newName)
		if err1 != nil || err2 != nil {
			unlock()
			return errors.Join(err1, err2)
		}
		if !ok1 || i1 != srcIno || ok2 != dstOK || (ok2 && i2 != dstIno) {
			unlock()
			continue
		}
		err = s.renameLocked(oldDir, oldName, newDir, newName, src, dst, flags)
		unlock()
		return err
	}
}

func (s *Store) renameLocked(oldDir *Inode, oldName string, newDir *Inode, newName string, src, dst *Inode, flags uint32) error {
	if oldDir.freed || newDir.freed {
		return syscall.ENOENT
	}
	if src == dst {
		return nil // same inode: POSIX says do nothing
	}
	if flags&RenameExchange != 0 && dst == nil {
		return syscall.ENOENT
	}
	if flags&RenameNoReplace != 0 && dst != nil {
		return syscall.EEXIST
	}
	if oldDir != newDir {
		if src.IsDir() && s.isAncestor(src, newDir) {
			return syscall.EINVAL
		}
		if flags&RenameExchange != 0 && dst.IsDir() && s.isAncestor(dst, oldDir) {
			return syscall.EINVAL
		}
	}
	if dst != nil && flags&RenameExchange == 0 {
		if src.IsDir() && !dst.IsDir() {
			return syscall.ENOTDIR
		}
		if !src.IsDir() && dst.IsDir() {
			return syscall.EISDIR
		}
		if dst.IsDir() {
			if empty, err := s.dirEmpty(dst); err != nil {
				return err
			} else if !empty {
				return syscall.ENOTEMPTY
			}
		}
	}
	big, dropOps := false, 0
	if dst != nil && flags&RenameExchange == 0 {
		var err error
		if dropOps, big, err = s.dropLinkCost(dst); err != nil {
			return err
		}
	}
	// A rename lives within the space it frees: the pool's.
	tx, err := s.beginOp(2*opsEntry+4*opsInode+dropOps, spacePool)
	if err != nil {
		return err
	}
	t := now()
	orphan := false
	move := func(in, from, to *Inode) {
		if in.IsDir() && from != to {
			from.attr.Nlink--
			to.attr.Nlink++
			in.attr.Parent = to.attr.Ino
		}
		in.attr.Ctime = t
	}
	if flags&RenameExchange != 0 {
		move(src, oldDir, newDir)
		move(dst, newDir, oldDir)
		tx.link(oldDir.attr.Ino, dst.attr.Ino, dst.attr.Mode, oldName)
		tx.link(newDir.attr.Ino, src.attr.Ino, src.attr.Mode, newName)
		tx.inode(&dst.attr)
	} else {
		tx.unlink(oldDir.attr.Ino, oldName)
		tx.link(newDir.attr.Ino, src.attr.Ino, src.attr.Mode, newName)
		if dst != nil {
			orphan = s.dropLinkLocked(dst, newDir, t, tx, big)
		}
		move(src, oldDir, newDir)
	}
	oldDir.attr.Mtime, oldDir.attr.Ctime = t, t
	newDir.attr.Mtime, newDir.attr.Ctime = t, t
	tx.inode(&src.attr)
	tx.inode(&oldDir.attr)
	if newDir != oldDir {
		tx.inode(&newDir.attr)
	}
	err = tx.commit()
	tx.end()
	if err == nil && orphan {
		s.freeLater(dst)
	}
	return err
}

// SetAttr changes attributes. Fields left nil are unchanged.
type SetAttr struct {
	Mode         *uint32 // permission bits only
	UID, GID     *uint32
	Size         *uint64
	Atime, Mtime *int64
	// Ctime is set by the kernel with the writeback cache, which owns a
	// file's times then; otherwise the change time is now.
	Ctime    *int64
	KillSUID bool // clear setuid/setgid (chown, or a write by a non-root caller)
}

// Setattr applies a to in.
func (s *Store) Setattr(in *Inode, a SetAttr) error {
	if a.Size == nil || s.zones == nil {
		return s.setattr(in, a)
	}
	// A truncate rewrites its new last block on zones, which may have to
	// wait for reclaim: then it starts again.
	return s.zoneRetry(func() error { return s.setattr(in, a) })
}

func (s *Store) setattr(in *Inode, a SetAttr) error {
	if err := s.writable(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ENOENT
	}
	if a.Size != nil && !in.IsReg() {
		return syscall.EINVAL
	}
	// chown drops file capabilities: looked up before anything changes.
	dropCaps := false
	if (a.UID != nil || a.GID != nil || a.KillSUID) && !in.IsDir() {
		_, ok, err := s.getXattr(in, xattrCaps)
		if err != nil {
			return err
		}
		dropCaps = ok
	}
	// chmod rewrites the access ACL's owner, group-class and other entries.
	var acc acl
	if a.Mode != nil && s.opts.ACL {
		v, ok, err := s.getXattr(in, XattrACLAccess)
		if err != nil {
			return err
		}
		if ok {
			if acc, err = parseACL(v); err != nil {
				return fmt.Errorf("inode %d: stored access ACL: %w", in.attr.Ino, format.ErrCorrupt)
			}
		}
	}
	if a.Size != nil {
		if err := s.truncateLocked(in, *a.Size); err != nil {
			return err
		}
	}
	ops := opsInode + opsXattr
	if acc != nil {
		ops += s.valueOps(len(acc) * aclEntrySize)
	}
	tx, err := s.beginOp(ops, spacePool)
	if err != nil {
		return err
	}
	defer tx.end()
	t := now()
	if a.Mode != nil {
		in.attr.Mode = in.attr.Mode&syscall.S_IFMT | *a.Mode&0o7777
		if acc != nil {
			acc.chmod(in.attr.Mode)
			tx.xattr(in.attr.Ino, XattrACLAccess, acc.encode())
		}
	}
	if a.UID != nil {
		in.attr.UID = *a.UID
	}
	if a.GID != nil {
		in.attr.GID = *a.GID
	}
	if (a.UID != nil || a.GID != nil || a.KillSUID) && !in.IsDir() {
		// chown clears setuid/setgid and file capabilities, as the kernel does.
		in.attr.Mode &^= syscall.S_ISUID
		if in.attr.Mode&0o010 != 0 {
			in.attr.Mode &^= syscall.S_ISGID
		}
		if dropCaps {
			tx.xattrDel(in.attr.Ino, xattrCaps)
		}
	}
	if a.Atime != nil {
		in.attr.Atime = *a.Atime
	}
	if a.Mtime != nil {
		in.attr.Mtime = *a.Mtime
	}
	in.attr.Ctime = t
	if a.Ctime != nil {
		in.attr.Ctime = *a.Ctime
	}
	tx.inode(&in.attr)
	return tx.commit()
}

// SetStream stores the inode's write stream (0 clears it).
func (s *Store) SetStream(in *Inode, id uint32) error {
	if err := s.writable(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ENOENT
	}
	tx, err := s.beginOp(opsInode, spacePool)
	if err != nil {
		return err
	}
	defer tx.end()
	in.attr.Stream = id
	in.attr.StreamSrc = format.StreamSrcSet
	if id == 0 {
		in.attr.StreamSrc = format.StreamSrcNone
	}
	if !in.IsReg() {
		// A regular file's ctime belongs to the kernel under the
		// writeback cache: it keeps its own and would never show ours.
		in.attr.Ctime = now()
	}
	tx.inode(&in.attr)
	return tx.commit()
}

// Fsync makes in (and, as on ext4 and XFS, every earlier namespace change,
// including its name and new parents) durable together with its data.
func (s *Store) Fsync(in *Inode) error {
	in.mu.Lock()
	s.logDirtyLocked(in)
	in.mu.Unlock()
	if s.readOnly.Load() {
		return nil
	}
	if s.j.Failed() {
		return syscall.EIO
	}
	return s.j.Sync()
}

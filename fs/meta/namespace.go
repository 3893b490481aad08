package meta

import (
	"sort"
	"syscall"
	"time"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

func now() int64 { return time.Now().UnixNano() }

// Get returns the inode with number ino, or nil.
func (s *Store) Get(ino uint64) *Inode { return s.itab.get(ino) }

// Root returns the root directory.
func (s *Store) Root() *Inode { return s.itab.get(RootIno) }

// Lookup finds name in directory dir.
func (s *Store) Lookup(dir *Inode, name string) (*Inode, error) {
	dir.mu.RLock()
	ino, ok := dir.dir[name]
	dir.mu.RUnlock()
	if !ok {
		return nil, syscall.ENOENT
	}
	in := s.itab.get(ino)
	if in == nil {
		return nil, syscall.ENOENT
	}
	return in, nil
}

// DirEntry is one readdir result.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32
}

// Readdir lists dir sorted by name (a stable order for offsets).
func (s *Store) Readdir(dir *Inode) ([]DirEntry, error) {
	dir.mu.RLock()
	if dir.dir == nil {
		dir.mu.RUnlock()
		return nil, syscall.ENOTDIR
	}
	out := make([]DirEntry, 0, len(dir.dir))
	for name, ino := range dir.dir {
		out = append(out, DirEntry{Name: name, Ino: ino})
	}
	dir.mu.RUnlock()
	for i := range out {
		if in := s.itab.get(out[i].Ino); in != nil {
			in.mu.RLock()
			out[i].Mode = in.attr.Mode
			in.mu.RUnlock()
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
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
				if ino > RootIno && s.itab.get(ino) == nil {
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
	if !format.ValidName(name) {
		return nil, syscall.EINVAL
	}
	if len(n.Target) > format.MaxTargetLen {
		return nil, syscall.ENAMETOOLONG
	}
	if err := s.metaRoom(); err != nil {
		return nil, err
	}
	isDir := n.Mode&syscall.S_IFMT == syscall.S_IFDIR
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.dir == nil || dir.freed {
		return nil, syscall.ENOENT
	}
	if _, ok := dir.dir[name]; ok {
		return nil, syscall.EEXIST
	}
	ino, err := s.newIno(dir, isDir)
	if err != nil {
		return nil, err
	}
	t := now()
	in := &Inode{attr: format.InodeRec{
		Ino: ino, Mode: n.Mode, UID: n.UID, GID: n.GID, Rdev: n.Rdev,
		Nlink: 1, Atime: t, Mtime: t, Ctime: t, Btime: t, Stream: dir.attr.Stream,
		Target: n.Target, Parent: dir.attr.Ino,
	}}
	switch {
	case n.RuleStream != 0:
		in.attr.Stream, in.attr.StreamSrc = n.RuleStream, format.StreamSrcRule
	case dir.attr.Stream != 0:
		in.attr.StreamSrc = format.StreamSrcDir
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
		in.dir = make(map[string]uint64)
	}
	var e format.Encoder
	s.opLock.RLock()
	s.itab.put(in)
	dir.dir[name] = in.attr.Ino
	if isDir {
		dir.attr.Nlink++
	}
	dir.attr.Mtime, dir.attr.Ctime = t, t
	e.Inode(&in.attr)
	e.Link(dir.attr.Ino, in.attr.Ino, name)
	e.Inode(&dir.attr)
	s.j.append(e.Buf, nil)
	s.opLock.RUnlock()
	return in, nil
}

// Link adds a hard link to in in dir.
func (s *Store) Link(dir *Inode, name string, in *Inode) error {
	if err := s.writable(); err != nil {
		return err
	}
	if !format.ValidName(name) {
		return syscall.EINVAL
	}
	if in.IsDir() {
		return syscall.EPERM
	}
	unlock := lockInodes(dir, in)
	defer unlock()
	if dir.dir == nil || dir.freed || in.freed {
		return syscall.ENOENT
	}
	if in.attr.Nlink == 0 {
		return syscall.ENOENT
	}
	if in.attr.Nlink >= 65000 {
		return syscall.EMLINK
	}
	if _, ok := dir.dir[name]; ok {
		return syscall.EEXIST
	}
	t := now()
	var e format.Encoder
	s.opLock.RLock()
	dir.dir[name] = in.attr.Ino
	in.attr.Nlink++
	in.attr.Ctime = t
	dir.attr.Mtime, dir.attr.Ctime = t, t
	e.Link(dir.attr.Ino, in.attr.Ino, name)
	e.Inode(&in.attr)
	e.Inode(&dir.attr)
	s.j.append(e.Buf, nil)
	s.opLock.RUnlock()
	return nil
}

// lockEntry locks dir and the inode its entry name points at (in inode
// order), retrying if the entry changes meanwhile. child is nil when the
// entry does not exist; then only dir is locked.
func (s *Store) lockEntry(dir *Inode, name string) (child *Inode, unlock func()) {
	for {
		dir.mu.RLock()
		ino, ok := dir.dir[name]
		dir.mu.RUnlock()
		if ok {
			child = s.itab.get(ino)
		} else {
			child = nil
		}
		unlock = lockInodes(dir, child)
		ino2, ok2 := dir.dir[name]
		if ok == ok2 && (!ok || ino2 == ino) {
			return child, unlock
		}
		unlock()
	}
}

// Remove unlinks name from dir; rmdir selects directories only.
func (s *Store) Remove(dir *Inode, name string, rmdir bool) error {
	if err := s.writable(); err != nil {
		return err
	}
	child, unlock := s.lockEntry(dir, name)
	defer unlock()
	if dir.dir == nil {
		return syscall.ENOTDIR
	}
	if child == nil {
		return syscall.ENOENT
	}
	if rmdir && !child.IsDir() {
		return syscall.ENOTDIR
	}
	if !rmdir && child.IsDir() {
		return syscall.EISDIR
	}
	if rmdir && len(child.dir) > 0 {
		return syscall.ENOTEMPTY
	}
	t := now()
	var e format.Encoder
	var freed []alloc.Extent
	s.opLock.RLock()
	delete(dir.dir, name)
	dir.attr.Mtime, dir.attr.Ctime = t, t
	e.Unlink(dir.attr.Ino, name)
	freed = s.dropLinkLocked(child, dir, t, &e)
	e.Inode(&dir.attr)
	s.j.append(e.Buf, freed)
	s.opLock.RUnlock()
	return nil
}

// dropLinkLocked removes one link of child (whose entry in dir is already
// gone) and frees it when nothing references it any more. child and dir are
// locked, opLock is held shared.
func (s *Store) dropLinkLocked(child, dir *Inode, t int64, e *format.Encoder) []alloc.Extent {
	if child.IsDir() {
		child.attr.Nlink = 0
		dir.attr.Nlink--
	} else if child.attr.Nlink > 0 {
		child.attr.Nlink--
	}
	child.attr.Ctime = t
	if child.attr.Nlink == 0 && child.opens == 0 {
		return s.freeInodeLocked(child, e)
	}
	e.Inode(&child.attr)
	return nil
}

// freeInodeLocked deletes in and returns its blocks for freeing after commit.
func (s *Store) freeInodeLocked(in *Inode, e *format.Encoder) []alloc.Extent {
	var freed []alloc.Extent
	for _, x := range in.ext.ext {
		freed = append(freed, alloc.Extent{Start: x.PBlk, Len: x.Len})
	}
	in.ext.ext = nil
	in.freed = true
	s.itab.del(in.attr.Ino)
	e.Free(in.attr.Ino)
	if in.dirty {
		in.dirty = false
		s.dirtyMu.Lock()
		delete(s.dirty, in)
		s.dirtyMu.Unlock()
	}
	return freed
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
	var e format.Encoder
	s.opLock.RLock()
	freed := s.freeInodeLocked(in, &e)
	s.j.append(e.Buf, freed)
	s.opLock.RUnlock()
}

// isAncestor reports whether a is dir or one of its ancestors. renameMu held.
func (s *Store) isAncestor(a, dir *Inode) bool {
	// The walk is bounded: a parent cycle on a damaged image must not hang
	// rename (it is refused instead; fsck repairs the cycle).
	limit := s.itab.count() + 1
	for cur, steps := dir, 0; ; steps++ {
		if steps > limit {
			return true
		}
		if cur == a {
			return true
		}
		if cur.attr.Ino == RootIno {
			return false
		}
		p := s.itab.get(cur.attr.Parent)
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
	if !format.ValidName(newName) {
		return syscall.EINVAL
	}
	// Directory moves between directories take renameMu so the ancestor
	// check below sees a stable tree (the kernel's s_vfs_rename_mutex).
	if oldDir != newDir {
		s.renameMu.Lock()
		defer s.renameMu.Unlock()
	}
	for {
		oldDir.mu.RLock()
		srcIno, ok := oldDir.dir[oldName]
		oldDir.mu.RUnlock()
		if !ok {
			return syscall.ENOENT
		}
		newDir.mu.RLock()
		dstIno, dstOK := newDir.dir[newName]
		newDir.mu.RUnlock()
		src := s.itab.get(srcIno)
		var dst *Inode
		if dstOK {
			dst = s.itab.get(dstIno)
		}
		if src == nil {
			return syscall.ENOENT
		}
		unlock := lockInodes(oldDir, newDir, src, dst)
		i1, ok1 := oldDir.dir[oldName]
		i2, ok2 := newDir.dir[newName]
		if !ok1 || i1 != srcIno || ok2 != dstOK || (ok2 && i2 != dstIno) {
			unlock()
			continue
		}
		err := s.renameLocked(oldDir, oldName, newDir, newName, src, dst, flags)
		unlock()
		return err
	}
}

func (s *Store) renameLocked(oldDir *Inode, oldName string, newDir *Inode, newName string, src, dst *Inode, flags uint32) error {
	if oldDir.dir == nil || newDir.dir == nil || oldDir.freed || newDir.freed {
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
		if dst.IsDir() && len(dst.dir) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	t := now()
	var e format.Encoder
	var freed []alloc.Extent
	s.opLock.RLock()
	defer s.opLock.RUnlock()
	move := func(in, from, to *Inode) {
		if in.IsDir() && from != to {
			from.attr.Nlink--
			to.attr.Nlink++
			in.attr.Parent = to.attr.Ino
		}
		in.attr.Ctime = t
	}
	if flags&RenameExchange != 0 {
		oldDir.dir[oldName] = dst.attr.Ino
		newDir.dir[newName] = src.attr.Ino
		move(src, oldDir, newDir)
		move(dst, newDir, oldDir)
		e.Link(oldDir.attr.Ino, dst.attr.Ino, oldName)
		e.Link(newDir.attr.Ino, src.attr.Ino, newName)
		e.Inode(&dst.attr)
	} else {
		delete(oldDir.dir, oldName)
		newDir.dir[newName] = src.attr.Ino
		e.Unlink(oldDir.attr.Ino, oldName)
		e.Link(newDir.attr.Ino, src.attr.Ino, newName)
		if dst != nil {
			freed = s.dropLinkLocked(dst, newDir, t, &e)
		}
		move(src, oldDir, newDir)
	}
	oldDir.attr.Mtime, oldDir.attr.Ctime = t, t
	newDir.attr.Mtime, newDir.attr.Ctime = t, t
	e.Inode(&src.attr)
	e.Inode(&oldDir.attr)
	if newDir != oldDir {
		e.Inode(&newDir.attr)
	}
	s.j.append(e.Buf, freed)
	return nil
}

// SetAttr changes attributes. Fields left nil are unchanged.
type SetAttr struct {
	Mode         *uint32 // permission bits only
	UID, GID     *uint32
	Size         *uint64
	Atime, Mtime *int64
	KillSUID     bool // clear setuid/setgid (chown, or a write by a non-root caller)
}

// Setattr applies a to in.
func (s *Store) Setattr(in *Inode, a SetAttr) error {
	if err := s.writable(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ENOENT
	}
	if a.Size != nil {
		if !in.IsReg() {
			return syscall.EINVAL
		}
		if err := s.truncateLocked(in, *a.Size); err != nil {
			return err
		}
	}
	t := now()
	var e format.Encoder
	s.opLock.RLock()
	if a.Mode != nil {
		in.attr.Mode = in.attr.Mode&syscall.S_IFMT | *a.Mode&0o7777
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
		if _, ok := in.xattr[xattrCaps]; ok {
			delete(in.xattr, xattrCaps)
			e.XattrDel(in.attr.Ino, xattrCaps)
		}
	}
	if a.Atime != nil {
		in.attr.Atime = *a.Atime
	}
	if a.Mtime != nil {
		in.attr.Mtime = *a.Mtime
	}
	in.attr.Ctime = t
	e.Inode(&in.attr)
	s.j.append(e.Buf, nil)
	s.opLock.RUnlock()
	return nil
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
	var e format.Encoder
	s.opLock.RLock()
	in.attr.Stream = id
	in.attr.StreamSrc = format.StreamSrcSet
	if id == 0 {
		in.attr.StreamSrc = format.StreamSrcNone
	}
	in.attr.Ctime = now()
	e.Inode(&in.attr)
	s.j.append(e.Buf, nil)
	s.opLock.RUnlock()
	return nil
}

// Fsync makes in (and, as on ext4 and XFS, every earlier namespace change,
// including its name and new parents) durable together with its data.
func (s *Store) Fsync(in *Inode) error {
	in.mu.Lock()
	s.logDirtyLocked(in)
	in.mu.Unlock()
	if s.readOnly {
		return nil
	}
	if s.j.failed.Load() {
		return syscall.EIO
	}
	return s.j.sync()
}

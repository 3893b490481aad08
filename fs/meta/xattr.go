package meta

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

// Xattr flags (setxattr(2)), and XattrKillSGID: an ACL set by a caller
// the kernel found outside the file's group and without CAP_FSETID; an
// access ACL set so clears the set-group-ID bit (as posix_acl_update_mode),
// a default ACL does not.
const (
	XattrCreate   = 1
	XattrReplace  = 2
	XattrKillSGID = 1 << 16
)

// maxXattrTotal bounds one inode's xattrs (names and values).
const maxXattrTotal = 256 << 10

// xattrNamespaceOK accepts the namespaces streamfs stores, and of system.*
// the two POSIX ACLs when the mount keeps ACLs (acl.go).
func (s *Store) xattrNamespaceOK(name string) bool {
	if IsACLName(name) {
		return s.opts.ACL
	}
	for _, p := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return true
		}
	}
	return false
}

// getXattr reads xattr name of in (in.mu held).
func (s *Store) getXattr(in *Inode, name string) ([]byte, bool, error) {
	return getChunks(s.treeFor(in.attr.Ino), format.XattrPrefix(in.attr.Ino, name), format.MaxXattrValue)
}

// listXattrs returns in's xattr names, sorted, and their total size.
func (s *Store) listXattrs(in *Inode) (names []string, total int, err error) {
	prefix := format.InoKindPrefix(in.attr.Ino, format.KindXattr)
	var derr error
	err = s.treeFor(in.attr.Ino).Ascend(prefix, func(k, v []byte) bool {
		if !bytes.HasPrefix(k, prefix) {
			return false
		}
		rest := k[len(prefix):]
		if len(rest) < 3 || rest[len(rest)-2] != 0 {
			derr = fmt.Errorf("inode %d: xattr key % x: %w", in.attr.Ino, k, format.ErrCorrupt)
			return false
		}
		if rest[len(rest)-1] == 0 {
			names = append(names, string(rest[:len(rest)-2]))
			total += len(rest) - 2
		}
		total += len(v)
		return true
	})
	if err == nil {
		err = derr
	}
	return names, total, treeErr(err)
}

// Getxattr returns the value of name.
func (s *Store) Getxattr(in *Inode, name string) ([]byte, error) {
	if IsACLName(name) && !s.opts.ACL {
		return nil, syscall.EOPNOTSUPP
	}
	in.mu.RLock()
	defer in.mu.RUnlock()
	v, ok, err := s.getXattr(in, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, syscall.ENODATA
	}
	return v, nil
}

// Listxattr returns the names, sorted.
func (s *Store) Listxattr(in *Inode) ([]string, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	names, _, err := s.listXattrs(in)
	if !s.opts.ACL {
		// ACLs stored by a mount with -o acl are not this mount's to show.
		kept := names[:0]
		for _, n := range names {
			if !IsACLName(n) {
				kept = append(kept, n)
			}
		}
		names = kept
	}
	return names, err
}

// Setxattr sets name to value.
func (s *Store) Setxattr(in *Inode, name string, value []byte, flags uint32) error {
	if err := s.writable(); err != nil {
		return err
	}
	if !s.xattrNamespaceOK(name) {
		return syscall.EOPNOTSUPP
	}
	if len(name) > format.MaxXattrName {
		return syscall.ERANGE
	}
	if len(value) > format.MaxXattrValue {
		return syscall.E2BIG
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ENOENT
	}
	old, exists, err := s.getXattr(in, name)
	if err != nil {
		return err
	}
	if flags&XattrCreate != 0 && exists {
		return syscall.EEXIST
	}
	if flags&XattrReplace != 0 && !exists {
		return syscall.ENODATA
	}
	mode, store := in.attr.Mode, true
	if IsACLName(name) {
		if mode, store, err = aclXattrSet(in, name, value); err != nil {
			return err
		}
		// The kernel sends the flag with either ACL; only the access
		// ACL clears the bit (fuse.h, posix_acl_update_mode).
		if flags&XattrKillSGID != 0 && name == XattrACLAccess {
			mode &^= syscall.S_ISGID
		}
	}
	if !store {
		// An access ACL the mode says all of: the mode, and no ACL.
		ops := opsInode
		if exists {
			ops += s.valueOps(len(old))
		}
		tx, err := s.beginOp(ops, spacePool)
		if err != nil {
			return err
		}
		defer tx.end()
		in.attr.Mode, in.attr.Ctime = mode, now()
		if exists {
			tx.xattrDel(in.attr.Ino, name)
		}
		tx.inode(&in.attr)
		return tx.commit()
	}
	_, total, err := s.listXattrs(in)
	if err != nil {
		return err
	}
	if exists {
		total -= len(name) + len(old)
	}
	if total+len(name)+len(value) > maxXattrTotal {
		return syscall.ENOSPC
	}
	tx, err := s.beginOp(opsInode+s.valueOps(len(old))+s.valueOps(len(value)), spaceGrow)
	if err != nil {
		return err
	}
	defer tx.end()
	in.attr.Mode, in.attr.Ctime = mode, now()
	tx.xattr(in.attr.Ino, name, value)
	tx.inode(&in.attr)
	return tx.commit()
}

// Removexattr deletes name.
func (s *Store) Removexattr(in *Inode, name string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if !s.xattrNamespaceOK(name) {
		return syscall.EOPNOTSUPP
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		// A freed inode may still be reachable through an O_PATH descriptor;
		// a record for it after its RecFree would break replay.
		return syscall.ENOENT
	}
	old, ok, err := s.getXattr(in, name)
	if err != nil {
		return err
	} else if !ok {
		return syscall.ENODATA
	}
	tx, err := s.beginOp(opsInode+s.valueOps(len(old)), spacePool)
	if err != nil {
		return err
	}
	defer tx.end()
	in.attr.Ctime = now()
	tx.xattrDel(in.attr.Ino, name)
	tx.inode(&in.attr)
	return tx.commit()
}

// Statfs are the counts statfs reports.
type Statfs struct {
	BlockSize        uint64
	Blocks, Free     uint64 // data blocks; Free is what can really be allocated
	Files, FilesFree uint64
	NameLen          uint32
}

// Statfs reports true counts: free blocks include those freed by
// transactions not yet committed, since an allocation that finds nothing
// commits and retries.
func (s *Store) Statfs() Statfs {
	pending := s.j.PendingFreeBlocks()
	// Old copies of tree nodes come back at the next checkpoint.
	s.nodeMu.Lock()
	for _, e := range s.nodeEv {
		if !e.alloc {
			pending++
		}
	}
	s.nodeMu.Unlock()
	var used uint64
	for i := range s.ags {
		s.ags[i].mu.Lock()
		used += uint64(max(s.ags[i].inodes, 0))
		s.ags[i].mu.Unlock()
	}
	// Inodes take tree space like everything else (about 256 bytes each
	// with their keys), so free space bounds them, as on XFS.
	// Preallocation windows are speculative: they are free space lent out.
	// Dirty inodes' reservations are not subtracted: journaling them takes
	// a few blocks (neighbours share a leaf), their worst case is far more.
	free := s.alloc.FreeBlocks() + pending + uint64(max(s.preBlocks.Load(), 0))
	free -= min(free, uint64(max(s.metaHeld.Load(), 0)))
	avail := free - min(free, s.metaReserve)
	ff := free * (s.bs / 256)
	blocks := s.sb.TotalBlocks - s.sb.MetaEnd() - 1
	if s.zones != nil {
		// File data lives in the sequential zones only; garbage counts
		// as free (reclaim turns it into free zones).
		sp := s.zones.a.Space()
		blocks, avail = sp.Total, sp.Avail
	}
	return Statfs{
		BlockSize: s.bs,
		Blocks:    blocks,
		Free:      avail,
		Files:     used + ff,
		FilesFree: ff,
		NameLen:   format.MaxNameLen,
	}
}

// StreamBytes returns bytes written per stream since mount.
func (s *Store) StreamBytes() map[uint32]uint64 {
	out := map[uint32]uint64{}
	for i := range s.stats.smallStreams {
		if n := s.stats.smallStreams[i].Load(); n > 0 {
			out[uint32(i)] = n
		}
	}
	s.stats.streamBytes.Range(func(k, v any) bool {
		out[k.(uint32)] = v.(interface{ Load() uint64 }).Load()
		return true
	})
	return out
}

// StreamFiles counts inodes per stream id (0: no stream), from the AG
// counters.
func (s *Store) StreamFiles() map[uint32]uint64 {
	out, _ := s.StreamFileSources()
	return out
}

// StreamFileSources counts inodes per stream, and per stream and stream
// source (format.StreamSrc*), from the AG counters.
func (s *Store) StreamFileSources() (files map[uint32]uint64, bySrc map[uint32][4]uint64) {
	files, bySrc = map[uint32]uint64{}, map[uint32][4]uint64{}
	var total, tagged int64
	for i := range s.ags {
		g := &s.ags[i]
		g.mu.Lock()
		total += g.inodes
		for k, n := range g.streams {
			if n > 0 {
				files[k.id] += uint64(n)
				c := bySrc[k.id]
				c[k.src&3] += uint64(n)
				bySrc[k.id] = c
				tagged += n
			}
		}
		g.mu.Unlock()
	}
	if total > tagged {
		files[0] = uint64(total - tagged)
	}
	return files, bySrc
}

// Trim discards free space of at least minLen blocks (FITRIM).
func (s *Store) Trim(minLen uint64) (uint64, error) {
	if s.ReadOnly() {
		return 0, syscall.EROFS
	}
	return s.alloc.Trim(max(minLen, 1), func(e alloc.Extent) error {
		return s.dev.Discard(int64(e.Start*s.bs), int64(e.Len*s.bs))
	})
}

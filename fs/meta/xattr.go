package meta

import (
	"sort"
	"strings"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

// Xattr flags (setxattr(2)).
const (
	XattrCreate  = 1
	XattrReplace = 2
)

// maxXattrTotal bounds one inode's xattrs (names and values).
const maxXattrTotal = 256 << 10

// xattrNamespaceOK accepts the namespaces streamfs stores. system.* (POSIX
// ACLs) is not supported.
func xattrNamespaceOK(name string) bool {
	for _, p := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return true
		}
	}
	return false
}

// Getxattr returns the value of name.
func (s *Store) Getxattr(in *Inode, name string) ([]byte, error) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	v, ok := in.xattr[name]
	if !ok {
		return nil, syscall.ENODATA
	}
	return v, nil
}

// Listxattr returns the names, sorted.
func (s *Store) Listxattr(in *Inode) []string {
	in.mu.RLock()
	defer in.mu.RUnlock()
	names := make([]string, 0, len(in.xattr))
	for k := range in.xattr {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Setxattr sets name to value.
func (s *Store) Setxattr(in *Inode, name string, value []byte, flags uint32) error {
	if err := s.writable(); err != nil {
		return err
	}
	if !xattrNamespaceOK(name) {
		return syscall.EOPNOTSUPP
	}
	if len(name) > format.MaxXattrName {
		return syscall.ERANGE
	}
	if len(value) > format.MaxXattrValue {
		return syscall.E2BIG
	}
	if err := s.metaRoom(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		return syscall.ENOENT
	}
	_, exists := in.xattr[name]
	if flags&XattrCreate != 0 && exists {
		return syscall.EEXIST
	}
	if flags&XattrReplace != 0 && !exists {
		return syscall.ENODATA
	}
	total := len(name) + len(value)
	for k, v := range in.xattr {
		if k != name {
			total += len(k) + len(v)
		}
	}
	if total > maxXattrTotal {
		return syscall.ENOSPC
	}
	var e format.Encoder
	s.opLock.RLock()
	if in.xattr == nil {
		in.xattr = make(map[string][]byte)
	}
	in.xattr[name] = append([]byte(nil), value...)
	in.attr.Ctime = now()
	e.Xattr(in.attr.Ino, name, value)
	e.Inode(&in.attr)
	s.j.append(e.Buf, nil)
	s.opLock.RUnlock()
	return nil
}

// Removexattr deletes name.
func (s *Store) Removexattr(in *Inode, name string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if !xattrNamespaceOK(name) {
		return syscall.EOPNOTSUPP
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.freed {
		// A freed inode may still be reachable through an O_PATH descriptor;
		// a record for it after its RecFree would break replay.
		return syscall.ENOENT
	}
	if _, ok := in.xattr[name]; !ok {
		return syscall.ENODATA
	}
	var e format.Encoder
	s.opLock.RLock()
	delete(in.xattr, name)
	in.attr.Ctime = now()
	e.XattrDel(in.attr.Ino, name)
	e.Inode(&in.attr)
	s.j.append(e.Buf, nil)
	s.opLock.RUnlock()
	return nil
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
	s.j.mu.Lock()
	var pending uint64
	for _, e := range s.j.pendingFree {
		pending += e.Len
	}
	s.j.mu.Unlock()
	used := uint64(s.itab.count())
	// Inodes are limited by the checkpoint slot; ~160 bytes each is a fair
	// estimate of their share of it.
	maxFiles := (s.sb.CkptBlocks - 1) * s.bs / 160
	ff := uint64(0)
	if maxFiles > used {
		ff = maxFiles - used
	}
	return Statfs{
		BlockSize: s.bs,
		Blocks:    s.sb.TotalBlocks - s.sb.MetaEnd() - 1,
		Free:      s.alloc.FreeBlocks() + pending,
		Files:     maxFiles,
		FilesFree: ff,
		NameLen:   format.MaxNameLen,
	}
}

// StreamBytes returns bytes written per stream since mount.
func (s *Store) StreamBytes() map[uint32]uint64 {
	out := map[uint32]uint64{}
	s.stats.streamBytes.Range(func(k, v any) bool {
		out[k.(uint32)] = v.(interface{ Load() uint64 }).Load()
		return true
	})
	return out
}

// StreamFiles counts regular files per stream id.
func (s *Store) StreamFiles() map[uint32]uint64 {
	out, _ := s.StreamFileSources()
	return out
}

// StreamFileSources counts regular files per stream, and per stream and
// stream source (format.StreamSrc*).
func (s *Store) StreamFileSources() (files map[uint32]uint64, bySrc map[uint32][4]uint64) {
	bySrc = map[uint32][4]uint64{}
	files = map[uint32]uint64{}
	for _, in := range s.itab.all() {
		in.mu.RLock()
		if in.IsReg() {
			files[in.attr.Stream]++
			c := bySrc[in.attr.Stream]
			c[in.attr.StreamSrc&3]++
			bySrc[in.attr.Stream] = c
		}
		in.mu.RUnlock()
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

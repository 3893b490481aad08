package meta

import (
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/streamfs/streamfs/fs/format"
)

// RootIno is the root directory's inode number (AG 0, agino 1).
const RootIno = 1

// Inode is the in-memory inode: the only copy of the metadata, made durable
// by the journal and checkpoints.
//
// Lock order (see Store): Store.renameMu → Inode.mu (several: ascending
// inode number) → Store.opLock (shared) → journal.mu. Allocator AG locks
// may be taken while holding Inode.mu; nothing in alloc calls back here.
type Inode struct {
	mu sync.RWMutex // guards every field below; writers also hold Store.opLock shared

	typ   uint32 // attr.Mode & S_IFMT; never changes, read without the lock
	attr  format.InodeRec
	ext   extentMap         // regular files
	dir   map[string]uint64 // directories: name → inode number
	xattr map[string][]byte // nil until the first xattr
	opens int               // open file handles (unlinked files live until 0)
	dirty bool              // attributes changed and not yet journaled
	freed bool              // deleted; the node may still be referenced by FUSE
	wbGen atomic.Uint64     // bumped on every failed data write (errseq); no lock
}

// WBGen counts failed data writes; file handles compare it to report a
// write error once at their next fsync or close, like the kernel's errseq.
func (in *Inode) WBGen() uint64 {
	return in.wbGen.Load()
}

// Ino is the inode number; it never changes.
func (in *Inode) Ino() uint64 { return in.attr.Ino }

// IsDir reports a directory.
func (in *Inode) IsDir() bool { return in.typ == syscall.S_IFDIR }

// IsReg reports a regular file.
func (in *Inode) IsReg() bool { return in.typ == syscall.S_IFREG }

// Attr returns a copy of the attributes.
func (in *Inode) Attr() format.InodeRec {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return in.attr
}

// Blocks returns the number of device blocks the file maps.
func (in *Inode) Blocks() uint64 {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return in.ext.blocks()
}

// Extents returns a copy of the extent map.
func (in *Inode) Extents() []Extent {
	in.mu.RLock()
	defer in.mu.RUnlock()
	return append([]Extent(nil), in.ext.ext...)
}

// inodeTable maps inode numbers to inodes, sharded so that lookups of
// unrelated inodes do not contend.
type inodeTable struct {
	shards [64]struct {
		mu sync.RWMutex // leaf lock: taken with nothing else acquired inside
		m  map[uint64]*Inode
	}
}

func newInodeTable() *inodeTable {
	t := &inodeTable{}
	for i := range t.shards {
		t.shards[i].m = make(map[uint64]*Inode)
	}
	return t
}

func (t *inodeTable) shard(ino uint64) int { return int((ino ^ ino>>32) % 64) }

func (t *inodeTable) get(ino uint64) *Inode {
	s := &t.shards[t.shard(ino)]
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[ino]
}

// put adds in; its type is fixed from here on.
func (t *inodeTable) put(in *Inode) {
	in.typ = in.attr.Mode & syscall.S_IFMT
	s := &t.shards[t.shard(in.attr.Ino)]
	s.mu.Lock()
	s.m[in.attr.Ino] = in
	s.mu.Unlock()
}

func (t *inodeTable) del(ino uint64) {
	s := &t.shards[t.shard(ino)]
	s.mu.Lock()
	delete(s.m, ino)
	s.mu.Unlock()
}

// all returns every inode, sorted by number (checkpoints are deterministic).
func (t *inodeTable) all() []*Inode {
	var out []*Inode
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for _, in := range s.m {
			out = append(out, in)
		}
		s.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].attr.Ino < out[j].attr.Ino })
	return out
}

func (t *inodeTable) count() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// lockInodes locks distinct inodes in ascending inode-number order and
// returns the unlock function.
func lockInodes(ins ...*Inode) func() {
	var uniq []*Inode
	for _, in := range ins {
		if in == nil {
			continue
		}
		dup := false
		for _, u := range uniq {
			if u == in {
				dup = true
			}
		}
		if !dup {
			uniq = append(uniq, in)
		}
	}
	sort.Slice(uniq, func(i, j int) bool { return uniq[i].attr.Ino < uniq[j].attr.Ino })
	for _, in := range uniq {
		in.mu.Lock()
	}
	return func() {
		for i := len(uniq) - 1; i >= 0; i-- {
			uniq[i].mu.Unlock()
		}
	}
}

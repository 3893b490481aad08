package meta

import (
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"weak"

	"github.com/streamfs/streamfs/fs/format"
)

// RootIno is the root directory's inode number (AG 0, agino 1).
const RootIno = 1

// Inode is the in-memory inode: its attributes, loaded from its AG's tree
// on first use and kept while something references the Inode (a FUSE node,
// an open file, a pending attribute change). Extents, directory entries and
// xattrs stay in the tree and its node cache.
//
// Lock order (see Store): Store.renameMu → Inode.mu (several: ascending
// inode number) → Store.opLock (shared) → a journal stripe lock. Allocator AG locks
// and tree locks may be taken while holding Inode.mu; nothing in alloc or
// the trees calls back here. Create locks its new inode before publishing
// it, out of that order: nobody else can hold it yet.
type Inode struct {
	mu sync.RWMutex // guards every field below; writers also hold Store.opLock shared

	typ   uint32 // attr.Mode & S_IFMT; never changes, read without the lock
	attr  format.InodeRec
	opens int           // open file handles (unlinked files live until 0)
	dirty bool          // attributes changed and not yet journaled
	freed bool          // deleted; the node may still be referenced by FUSE
	wbGen atomic.Uint64 // bumped on every failed data write (errseq); no lock
	// preMu (a leaf, inside mu) guards pre, the allocated, unmapped
	// blocks for the next appends (prealloc.go): an allocation that
	// runs out of space takes every file's windows back without their
	// inode locks.
	preMu sync.Mutex
	pre   []prealloc
	// noCaps: the inode is known to have no security.capability xattr,
	// so a write skips the lookup (data.go killPrivLocked); cleared when
	// that xattr is set (apply).
	noCaps bool
	// extEnd is 1 + an upper bound of the file blocks its extents map (0:
	// not known yet): a write wholly past it lands in a hole without a
	// tree lookup. Atomic because readers fill it in under the shared lock.
	extEnd atomic.Uint64
	// badExtLogged: a corrupt extent of this inode was logged once
	// (extcheck.go); later refusals only return the error.
	badExtLogged atomic.Bool
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
	return in.attr.Blocks
}

// inodeTable finds the Inode of a number while anything references it. It
// holds weak pointers: an Inode nothing else references is collected and
// reloaded from the tree when next needed, so memory follows what the
// kernel and open files hold, not the number of files. Sharded so that
// lookups of unrelated inodes do not contend.
type inodeTable struct {
	shards [64]struct {
		mu sync.Mutex // leaf lock: taken with nothing else acquired inside
		m  map[uint64]weak.Pointer[Inode]
	}
}

func newInodeTable() *inodeTable {
	t := &inodeTable{}
	for i := range t.shards {
		t.shards[i].m = make(map[uint64]weak.Pointer[Inode])
	}
	return t
}

func (t *inodeTable) shard(ino uint64) int { return int((ino ^ ino>>32) % 64) }

// get returns the live Inode of ino, or nil.
func (t *inodeTable) get(ino uint64) *Inode {
	s := &t.shards[t.shard(ino)]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[ino].Value()
}

// getOrPut returns the live Inode of ino, or registers in (whose attr is
// loaded) and returns it.
func (t *inodeTable) getOrPut(in *Inode) *Inode {
	ino := in.attr.Ino
	s := &t.shards[t.shard(ino)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.m[ino].Value(); cur != nil {
		return cur
	}
	t.putLocked(s.m, in)
	return in
}

// put registers a new inode; its type is fixed from here on.
func (t *inodeTable) put(in *Inode) {
	s := &t.shards[t.shard(in.attr.Ino)]
	s.mu.Lock()
	t.putLocked(s.m, in)
	s.mu.Unlock()
}

func (t *inodeTable) putLocked(m map[uint64]weak.Pointer[Inode], in *Inode) {
	in.typ = in.attr.Mode & syscall.S_IFMT
	ino := in.attr.Ino
	wp := weak.Make(in)
	m[ino] = wp
	runtime.AddCleanup(in, func(ino uint64) { t.drop(ino, wp) }, ino)
}

// drop forgets ino's entry if it still is the collected wp.
func (t *inodeTable) drop(ino uint64, wp weak.Pointer[Inode]) {
	s := &t.shards[t.shard(ino)]
	s.mu.Lock()
	if s.m[ino] == wp {
		delete(s.m, ino)
	}
	s.mu.Unlock()
}

func (t *inodeTable) del(ino uint64) {
	s := &t.shards[t.shard(ino)]
	s.mu.Lock()
	delete(s.m, ino)
	s.mu.Unlock()
}

// testHookCreate, set by tests only, runs inside Create once the new inode
// is published (a lookup by number can find it) and before its records are
// applied and journaled.
var testHookCreate func(ino uint64)

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

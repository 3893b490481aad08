package fs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
)

// The daemon keeps a Node (with go-fuse's Inode and the meta.Inode it
// holds) for every inode the kernel has cached, until the kernel sends
// FORGET; the kernel keeps dentries and inodes until memory pressure. At
// 1M files created that was ~650 bytes of live heap per file (heap
// profile: meta.Inode 208, go-fuse Inode and its identity-table entry
// ~290, our Node, the parent's children map) and 1.3 GiB of RSS. So the
// daemon bounds its nodes: past a limit derived from the cache size it
// asks the kernel to prune the coldest ones (FUSE_NOTIFY_PRUNE). The
// kernel drops only unused dentries and inodes — an open file, a working
// directory or a directory with cached children stays — and sends FORGET
// for what it dropped; a later access looks the name up again.

// NodeBytes is what one kernel-cached inode costs the daemon, with the
// garbage collector's headroom: the unit of the node limit.
const NodeBytes = 1024

// minNodes keeps a tiny cache usable: a path walk needs its directories.
const minNodes = 256

// NodeLimit is the number of nodes the daemon keeps for a cache of
// cacheBytes: a quarter of it, at NodeBytes each.
func NodeLimit(cacheBytes int64) int {
	return max(int(cacheBytes/4/NodeBytes), minNodes)
}

// pruneBatch is the node ids sent in one notification (8 bytes each).
const pruneBatch = 512

// nodeSet is every Node the kernel holds, in CLOCK order: the sweeper
// walks it from the front; a node used since its last visit gets a second
// chance, the others are pruned. Root is not in it.
type nodeSet struct {
	mu    sync.Mutex // leaf lock: guards the list, count and round
	head  Node       // sentinel of the circular list
	count int
	// round numbers the sweeper's rounds (a new one each second); a node
	// is asked for once a round. pending is how many nodes this round asked
	// the kernel to prune that are not forgotten yet: their FORGET is on
	// its way, or the kernel could not drop them.
	round   uint64
	pending int

	limit  int
	kick   chan struct{} // cap 1: count went over the limit
	pruned atomic.Uint64 // nodes asked to be pruned (stats)
}

// nodeLinks are a Node's place in the nodeSet.
type nodeLinks struct {
	prev, next *Node // nil: not in the set
	round      uint64
	used       atomic.Bool // touched since the sweeper's last visit
}

// setLimit sets the limit; 0 keeps every node.
func (s *nodeSet) setLimit(limit int) {
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
}

// add puts a new node at the back (most recently used).
func (s *nodeSet) add(n *Node) {
	s.mu.Lock()
	if s.head.links.next == nil { // zero value: empty circle
		s.head.links.prev, s.head.links.next = &s.head, &s.head
		s.kick = make(chan struct{}, 1)
	}
	s.linkBack(n)
	s.count++
	over := s.limit > 0 && s.count > s.limit
	s.mu.Unlock()
	if over {
		select {
		case s.kickCh() <- struct{}{}:
		default:
		}
	}
}

func (s *nodeSet) linkBack(n *Node) {
	last := s.head.links.prev
	n.links.prev, n.links.next = last, &s.head
	last.links.next = n
	s.head.links.prev = n
}

func (s *nodeSet) unlink(n *Node) {
	n.links.prev.links.next = n.links.next
	n.links.next.links.prev = n.links.prev
	n.links.prev, n.links.next = nil, nil
}

// remove takes a forgotten node out.
func (s *nodeSet) remove(n *Node) {
	s.mu.Lock()
	if n.links.next != nil {
		s.unlink(n)
		s.count--
		if n.links.round == s.round && s.pending > 0 {
			s.pending--
		}
	}
	s.mu.Unlock()
}

func (s *nodeSet) kickCh() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
	}
	return s.kick
}

func (s *nodeSet) getLimit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// len is the number of nodes held.
func (s *nodeSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// pick returns up to want cold node ids, walking at most budget nodes;
// every node it passes goes to the back.
func (s *nodeSet) pick(want int, budget *int) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []uint64
	for len(ids) < want && *budget > 0 && s.count > 0 {
		*budget--
		n := s.head.links.next
		s.unlink(n)
		s.linkBack(n)
		if n.links.used.Swap(false) || n.links.round == s.round {
			continue // second chance; or already asked this round
		}
		n.links.round = s.round
		s.pending++
		ids = append(ids, n.StableAttr().Ino)
	}
	return ids
}

// excess is how many nodes are over the low mark, not counting those
// whose FORGET is on its way.
func (s *nodeSet) excess() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count - s.pending - s.limit*7/8
}

func (s *nodeSet) newRound() {
	s.mu.Lock()
	s.round++
	s.pending = 0
	s.mu.Unlock()
}

// touch marks n used: the sweeper passes it over once.
func (n *Node) touch() { n.links.used.Store(true) }

// OnForget implements gofs.NodeOnForgetter: the kernel dropped the inode.
func (n *Node) OnForget() { n.fs.nodes.remove(n) }

// sweepNodes prunes the coldest nodes whenever the set grows past its
// limit, until stop is closed. It runs outside every request and holds no
// lock while it notifies: the kernel takes inode and dentry locks to prune.
func (f *FS) sweepNodes(srv *fuse.Server, stop <-chan struct{}) {
	s := &f.nodes
	kick := s.kickCh()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-kick:
		case <-tick.C:
			// Nodes asked for in earlier rounds that are still here were
			// in use; they may be asked for again.
			s.newRound()
		}
		if limit := s.getLimit(); limit <= 0 || s.len() <= limit {
			continue
		}
		// One pass visits every node at most twice (a second chance
		// each), so nodes the kernel cannot drop do not keep it spinning.
		budget := 2 * s.len()
		for budget > 0 {
			want := min(s.excess(), pruneBatch)
			if want <= 0 {
				break
			}
			ids := s.pick(want, &budget)
			if len(ids) == 0 {
				break
			}
			st := srv.PruneNotify(ids)
			if st == fuse.ENOSYS {
				if f.Log != nil {
					f.Log.Warn("the kernel cannot prune inodes (FUSE_NOTIFY_PRUNE needs FUSE protocol 7.45): daemon memory follows the kernel's inode cache")
				}
				return
			}
			if st != fuse.OK && st != fuse.ENOENT {
				if f.Log != nil {
					f.Log.Debug("prune notification", zap.String("status", st.String()))
				}
				break
			}
			s.pruned.Add(uint64(len(ids)))
		}
	}
}

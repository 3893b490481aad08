package meta

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAtimeOnFullDevice: reads (atime) of many files on a full device mark
// their inodes dirty; journaling them afterwards must find its node
// blocks (roomForDirty), not shut the filesystem down.
func TestAtimeOnFullDevice(t *testing.T) {
	s := newTestStore(t, 64<<20)
	const n = 20000
	ins := manyFiles(t, s, n, nil)
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	s.TrimPrealloc(fillDevice(t, s, "big"))
	t.Logf("full: free %d reserve %d floor %d height %d", s.alloc.FreeBlocks(), s.metaReserve, s.ckptFloor(), s.treeHeight.Load())
	for i, in := range ins {
		s.TouchAtime(in, int64(i)+1)
	}
	t.Logf("after atime: dirty %d held %d free %d", s.dirtyCount.Load(), s.held(), s.alloc.FreeBlocks())
	a0 := s.nodeAllocs.Load()
	err := s.SyncAll()
	t.Logf("node allocs during SyncAll: %d; atime %d; pending free %d", s.nodeAllocs.Load()-a0, ins[5].attr.Atime, s.j.PendingFreeBlocks())
	t.Logf("SyncAll: %v; shut down: %v; free %d", err, s.j.Failed(), s.alloc.FreeBlocks())
	cerr := s.checkpoint()
	t.Logf("checkpoint: %v; shut down: %v; free %d", cerr, s.j.Failed(), s.alloc.FreeBlocks())
	if s.j.Failed() {
		t.Errorf("atime updates on a full filesystem shut it down")
	}
}

// TestOverwriteOnFullDevice: in-place overwrites of many files on a full
// device allocate nothing but mark their inodes dirty: the same.
func TestOverwriteOnFullDevice(t *testing.T) {
	s := newTestStore(t, 64<<20)
	const n = 10000
	ins := manyFiles(t, s, n, make([]byte, 4096))
	s.TrimPrealloc(fillDevice(t, s, "big"))
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	t.Logf("full: free %d reserve %d floor %d", s.alloc.FreeBlocks(), s.metaReserve, s.ckptFloor())
	for i, in := range ins {
		if _, err := s.Write(in, []byte{1}, 10, WriteOpts{}); err != nil {
			t.Fatalf("overwrite %d: %v (shut down %v)", i, err, s.j.Failed())
		}
	}
	err := s.SyncAll()
	t.Logf("SyncAll: %v; shut down: %v; free %d", err, s.j.Failed(), s.alloc.FreeBlocks())
	if s.j.Failed() {
		t.Errorf("in-place overwrites on a full filesystem shut it down")
	}
}

// TestLowRoomNoCheckpointStorm: with the pool in use but no old node copies
// waiting, operations do not kick a checkpoint each (each would pause every
// operation and give nothing back).
func TestLowRoomNoCheckpointStorm(t *testing.T) {
	s := newTestStore(t, 64<<20)
	const n = 4000
	ins := manyFiles(t, s, n, nil)
	s.TrimPrealloc(fillDevice(t, s, "big"))
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	t.Logf("full: free %d room %d lowRoom %v", s.alloc.FreeBlocks(), s.room(), s.lowRoom())
	long := strings.Repeat("x", 240)
	renamed := 0
	for i := 0; i < n && s.room() > 170; i++ {
		if i%50 == 0 {
			_ = s.checkpoint()
		}
		if err := s.Rename(s.Root(), "f"+itoa(uint64(i)), s.Root(), long+itoa(uint64(i)), 0); err != nil {
			t.Logf("rename %d: %v", i, err)
			break
		}
		renamed++
	}
	time.Sleep(200 * time.Millisecond)
	_ = s.checkpoint()
	c0 := s.stats.checkpoints.Load()
	t.Logf("after %d renames: free %d room %d lowRoom %v nodeFrees %d", renamed, s.alloc.FreeBlocks(), s.room(), s.lowRoom(), s.nodeFrees.Load())
	const ops = 20000
	for i := 0; i < ops; i++ {
		if err := s.SetStream(ins[n-1-(i%300)], uint32(i%4)); err != nil {
			t.Fatalf("setstream: %v", err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the committer acts on kicks
	caused := s.stats.checkpoints.Load() - c0
	t.Logf("%d small ops caused %d checkpoints; lowRoom %v room %d", ops, caused, s.lowRoom(), s.room())
	if caused > 2 {
		t.Errorf("%d operations at low room with nothing to give back caused %d checkpoints", ops, caused)
	}
}

// manyFiles creates files f0..f(n-1) in the root, each holding data (none
// if nil), with no preallocation left behind.
func manyFiles(t *testing.T, s *Store, n int, data []byte) []*Inode {
	t.Helper()
	ins := make([]*Inode, 0, n)
	for i := 0; i < n; i++ {
		in, err := s.Create(s.Root(), "f"+itoa(uint64(i)), NewInode{Mode: syscall.S_IFREG | 0o644})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if len(data) > 0 {
			if _, err := s.Write(in, data, 0, WriteOpts{}); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			s.TrimPrealloc(in)
		}
		ins = append(ins, in)
	}
	return ins
}

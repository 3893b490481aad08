package meta

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

// REVIEW: checkpointLocked tests j.failed before it takes opLock; an
// operation that fails to apply (here: EIO reading a free-space tree node
// inside applyMap) shuts the filesystem down while holding opLock shared,
// and the checkpoint that was already waiting for opLock then snapshots
// and writes the half-applied trees after the shutdown.
func TestReviewCheckpointAfterShutdown(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 1)
	s, err := Open(fd, reviewOpts())
	if err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, s.Root(), "f")
	stream := uint32(0)
	for id := uint32(1); id <= s.alloc.MaxStreams(); id++ {
		if first, _ := alloc.StreamAGSet(id, s.alloc.MaxStreams(), s.sb.AGCount); first != alloc.InoAG(f.Ino()) {
			stream = id
			break
		}
	}
	t.Logf("AGs %d, streams %d, inode AG %d, using stream %d", s.sb.AGCount, s.alloc.MaxStreams(), alloc.InoAG(f.Ino()), stream)
	if err := s.SetStream(f, stream); err != nil { // data in another AG than the inode
		t.Fatal(err)
	}
	mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 4096, 1), 0)
	if err := s.Fsync(f); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(fd, reviewOpts()); err != nil {
		t.Fatal(err)
	}
	f, _ = s.Lookup(s.Root(), "f")
	ext0, _ := s.Extents(f)
	ag := s.agOfBlock(ext0[0].PBlk)
	if ag == alloc.InoAG(f.Ino()) {
		t.Skipf("data landed in the inode's AG %d (extent %v)", ag, ext0)
	}
	root := s.trees[ag].Root()
	s.trees[ag].Written() // drains ristretto's buffers (settle)
	s.cache.Invalidate(root)

	var armed atomic.Bool
	reached, release := make(chan struct{}), make(chan struct{})
	target := int64(root * s.bs)
	fd.FailReads(func(off, n int64) bool {
		if !armed.Load() || off != target {
			return false
		}
		armed.Store(false)
		close(reached)
		<-release
		return true // EIO reading AG's free-space node inside applyMap
	})
	before, seq0 := fd.Stats().Writes, s.j.CheckpointSeq()
	armed.Store(true)
	wdone := make(chan struct{})
	var werr error
	go func() {
		_, werr = s.Write(f, datatag.Bytes(f.Ino(), 4096, 4096, 2), 4096, WriteOpts{})
		close(wdone)
	}()
	<-reached
	cdone := make(chan error, 1)
	go func() { cdone <- s.checkpoint() }() // e.g. the committer's periodic one
	for s.opLock.TryRLock() {               // until the checkpoint waits for opLock
		s.opLock.RUnlock()
		time.Sleep(time.Millisecond)
	}
	close(release)
	<-wdone
	cerr := <-cdone
	after := fd.Stats().Writes
	t.Logf("write: %v", werr)
	t.Logf("shut down: %v; checkpoint that began before the shutdown returned %v; checkpoint seq %d -> %d; device writes since arming: %d (1 is the data write)",
		s.j.Failed(), cerr, seq0, s.j.CheckpointSeq(), after-before)
	s.Close()

	rep, err := Fsck(fd, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fsck after remount:\n  %s", strings.Join(rep.Problems, "\n  "))

	if s, err = Open(fd, reviewOpts()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, _ = s.Lookup(s.Root(), "f")
	fe, _ := s.Extents(f)
	g := mustCreate(t, s, s.Root(), "g")
	_ = s.SetStream(g, stream)
	mustWrite(t, s, g, datatag.Bytes(g.Ino(), 0, 8192, 3), 0)
	ge, _ := s.Extents(g)
	t.Logf("f extents %v\ng extents %v", fe, ge)
	if err := s.Fsync(g); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, f, datatag.Bytes(f.Ino(), 4096, 4096, 4), 4096) // f appends
	if got, want := readAll(t, s, g), datatag.Bytes(g.Ino(), 0, 8192, 3); !bytes.Equal(got, want) {
		t.Errorf("g's fsync'd data was overwritten by an append to f (shared block)")
	}
	if cerr == nil && after > before {
		t.Errorf("a checkpoint wrote %d blocks after the filesystem shut down", after-before)
	}
	if len(rep.Problems) > 0 {
		t.Errorf("image written after shutdown is inconsistent: %d fsck problems", len(rep.Problems))
	}
}

func reviewOpts() Options { o := testOpts(); o.Policy = alloc.PolicyStreams; return o }

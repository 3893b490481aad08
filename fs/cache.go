package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/transport/uring"
)

// The kernel's page cache sits in front of the daemon (the writeback cache,
// KEEP_CACHE), and two requests would otherwise answer from behind it:
//
// A direct write (a FOPEN_DIRECT_IO handle). The kernel drops the cached
// pages of the range before it sends the WRITE, but not after: a buffered
// read in between fills them again from the daemon's old data, and they
// stay cached, so a read after the write has completed returns what it
// overwrote (xfstests generic/451). The daemon drops them again once the
// data is written and before it replies, as a kernel filesystem does after
// a direct write. Dropping waits for pages under read, which is the point.
// It costs a notification per direct write, so it is done only while the
// kernel may hold pages of the file: only buffered handles fill the page
// cache, and once none is open a direct write drops every page of the
// file and clears the mark, so a file written only directly after that (a
// database, fio after laying its file out) pays nothing. Never for
// writeback, which may come through a direct handle too. Not covered:
// pages faulted in through a MAP_SHARED mapping of a direct handle
// (DIRECT_IO_ALLOW_MMAP) while a direct write to them is in flight.
//
// SEEK_DATA and SEEK_HOLE. The kernel sends LSEEK without writing dirty
// pages back first, so a buffered write not yet written back would read as
// a hole, or past EOF. Invalidating the range from the seek offset makes
// the kernel write its dirty pages there back (and wait for pages already
// under writeback) before dropping them; then the daemon's extent map and
// size are the file's. Only while a writable handle is open: the last
// close writes every dirty page back before RELEASE.

// maxBlockingDrops bounds the direct writes that wait for their
// invalidation before replying. An invalidation may wait for a page under
// readahead or writeback, and those are background requests: if every one
// of the kernel's background slots (MaxBackground) were held by an async
// direct WRITE waiting here, the READ or WRITE it waits for could never be
// sent. Half the slots may wait; beyond that the invalidation runs after
// the reply, a window that needs that many concurrent direct writes to
// files that have cached pages.
const maxBlockingDrops = maxBackground / 2

// dropCached drops the kernel's cached pages of [off, off+length) after a
// direct write there, or all of them when no buffered handle is open.
func (n *Node) dropCached(off int64, length int) {
	if length <= 0 || !n.cached.Load() {
		return
	}
	f := n.fs
	srv := f.server()
	if srv == nil {
		return
	}
	size := int64(length)
	n.cacheMu.Lock()
	if n.buffered.Load() == 0 {
		// No handle can fill pages until an open sets the mark again.
		if n.cached.Swap(false) {
			f.cachedFiles.Add(-1)
		}
		off, size = 0, 0
	}
	n.cacheMu.Unlock()
	ino := n.in.Ino()
	drop := func() {
		defer f.drops.Add(-1)
		f.notifyInval(srv, ino, off, size)
	}
	// On an io_uring queue's thread the pages under read may wait for a
	// READ queued on that very ring: never wait there (transport.go sends
	// such WRITEs to their own goroutine; this covers a buffered open that
	// raced with the decision).
	if f.drops.Add(1) <= maxBlockingDrops && !uring.OnRingThread() {
		drop()
		return
	}
	go drop()
}

// writeBackCached makes the kernel write back its dirty pages of n from
// off on, before a SEEK_DATA or SEEK_HOLE is answered from the extent map.
func (n *Node) writeBackCached(off int64) {
	if n.writers.Load() <= 0 {
		return
	}
	if srv := n.fs.server(); srv != nil {
		// Length 0: to the end of the file.
		n.fs.notifyInval(srv, n.in.Ino(), off, 0)
	}
}

// notifyInval invalidates the kernel's pages of ino in [off, off+length)
// (length 0: to the end) and its attributes. ENOENT: the kernel does not
// hold the inode, so it holds no pages either.
func (f *FS) notifyInval(srv *fuse.Server, ino uint64, off, length int64) {
	if st := srv.InodeNotify(ino, off, length); st != fuse.OK && st != fuse.ENOENT && f.Log != nil {
		f.Log.Debug("page cache invalidation", zap.Uint64("ino", ino), zap.Int64("off", off),
			zap.Int64("len", length), zap.String("status", st.String()))
	}
}

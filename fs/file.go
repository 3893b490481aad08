package fs

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/meta"
)

// handle is an open file. It remembers the inode's write-error generation
// at open, so a failed data write is reported once per open file at its
// next fsync or close (the kernel's errseq behaviour).
type handle struct {
	in    *meta.Inode
	flags uint32
	// direct: the kernel was told FOPEN_DIRECT_IO, so its write(2)s come
	// from user memory, never from locked page-cache folios (cache.go);
	// page-cache writeback may still use the handle.
	direct bool

	mu     sync.Mutex // guards wbSeen
	wbSeen uint64
}

func (f *FS) openHandle(in *meta.Inode, flags uint32) (*handle, uint32, syscall.Errno) {
	if err := f.Store.OpenFile(in); err != nil {
		return nil, 0, errno(err)
	}
	h := &handle{in: in, flags: flags, wbSeen: in.WBGen()}
	fl := f.cacheOpenFlags(in, flags)
	if writable(flags) && flags&syscall.O_DIRECT == 0 && !f.Store.RoomForWriteback() {
		// Nearly full: write-through, so write(2) itself gets ENOSPC.
		fl |= fuse.FOPEN_DIRECT_IO
	}
	if flags&syscall.O_DIRECT != 0 {
		fl |= fuse.FOPEN_DIRECT_IO
		// Parallel direct writes only when no append can race for EOF.
		if flags&syscall.O_APPEND == 0 {
			fl |= fuse.FOPEN_PARALLEL_DIRECT_WRITES
		}
	}
	h.direct = fl&fuse.FOPEN_DIRECT_IO != 0
	return h, fl, 0
}

// opened accounts a new handle of n (cache.go).
func (n *Node) opened(h *handle) {
	if writable(h.flags) {
		n.writers.Add(1)
	}
	if !h.direct {
		n.cacheMu.Lock()
		n.buffered.Add(1)
		if !n.cached.Swap(true) {
			n.fs.cachedFiles.Add(1)
		}
		n.cacheMu.Unlock()
	}
}

// closed undoes opened at RELEASE.
func (n *Node) closed(h *handle) {
	if writable(h.flags) {
		n.writers.Add(-1)
	}
	if !h.direct {
		n.buffered.Add(-1)
	}
}

// writeErr returns EIO once for every write error since the last check.
func (h *handle) writeErr() syscall.Errno {
	g := h.in.WBGen()
	h.mu.Lock()
	defer h.mu.Unlock()
	if g != h.wbSeen {
		h.wbSeen = g
		return syscall.EIO
	}
	return 0
}

func writable(flags uint32) bool { return flags&syscall.O_ACCMODE != syscall.O_RDONLY }

// Open implements gofs.NodeOpener.
func (n *Node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	n.touch()
	if !n.in.IsReg() {
		if n.in.IsDir() {
			return nil, 0, syscall.EISDIR
		}
		return nil, 0, 0
	}
	if writable(flags) && n.fs.Store.ReadOnly() {
		return nil, 0, syscall.EROFS
	}
	h, fl, e := n.fs.openHandle(n.in, flags)
	if e == 0 {
		n.opened(h)
	}
	return h, fl, e
}

// Read implements gofs.NodeReader.
func (n *Node) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	c, err := n.fs.Store.Read(n.in, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	n.fs.touchAtime(n.in)
	return fuse.ReadResultData(dest[:c]), 0
}

// Write implements gofs.NodeWriter.
func (n *Node) Write(ctx context.Context, f gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	uid, _ := caller(ctx)
	// Page-cache writeback comes without a caller (the kernel sends it
	// with no credentials: uid, gid and pid 0). The writer that dirtied
	// the pages already had setuid/setgid dropped by a write-through
	// WRITE (FUSE_WRITE_KILL_SUIDGID) that carries its own uid.
	wb := isWriteback(ctx)
	c, err := n.fs.Store.Write(n.in, data, off, meta.WriteOpts{KillSUID: uid != 0, Writeback: wb})
	// A short write(2) is reported as such (the next one gets the error);
	// writeback looks only at the error, so it must get one.
	if err != nil && (c == 0 || wb) {
		return 0, errno(err)
	}
	// Writeback may come through a direct handle too (the kernel picks any
	// writable one), with its folios under writeback until the reply:
	// dropping them here would wait for ourselves.
	if h, ok := f.(*handle); ok && h.direct && !wb {
		n.dropCached(off, c)
	}
	if l := n.fs.Log; l != nil && l.Core().Enabled(zap.DebugLevel) {
		n.fs.logPlacement(n.in, off, c)
	}
	return uint32(c), 0
}

// logPlacement logs, at debug level, where a write's data went: the
// file's stream and the AG and block of each extent it touched.
func (f *FS) logPlacement(in *meta.Inode, off int64, n int) {
	bs := int64(f.Store.Super().BlockSize)
	agBlocks := f.Store.Super().AGBlocks
	first, last := uint64(off/bs), uint64((off+int64(n)-1)/bs)
	exts, _ := f.Store.ExtentRange(in, first, last-first+1)
	var places []string
	for _, e := range exts {
		places = append(places, fmt.Sprintf("ag=%d blk=%d+%d", e.PBlk/agBlocks, e.PBlk, e.Len))
	}
	f.Log.Debug("write placed", zap.Uint64("ino", in.Ino()), zap.Int64("off", off), zap.Int("len", n),
		zap.Uint32("stream", in.Attr().Stream), zap.Strings("extents", places))
}

// Fsync implements gofs.NodeFsyncer.
func (n *Node) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	err := errno(n.fs.Store.Fsync(n.in))
	if h, ok := f.(*handle); ok {
		if e := h.writeErr(); e != 0 {
			return e
		}
	}
	return err
}

// Flush implements gofs.NodeFlusher. It answers ENOSYS, which the kernel
// takes as "never send FLUSH again" on this mount: with the writeback
// cache it would otherwise send one at every close(2), read-only ones too
// (FOPEN_NOFLUSH is ignored in that mode), one more round trip for every
// file a touch, tar or cp creates. close still reports a failed write: the
// kernel writes the dirty pages back before it would send FLUSH and
// returns the error the mapping recorded from the failed WRITE
// (filemap_check_errors); a write(2) that goes to the daemon directly gets
// its error itself; and every open file hears of it at its next fsync.
// streamfs keeps no POSIX locks of its own (the kernel does), so no lock
// owner needs the FLUSH either.
func (n *Node) Flush(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	return syscall.ENOSYS
}

// Release implements gofs.NodeReleaser.
func (n *Node) Release(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	if h, ok := f.(*handle); ok {
		if writable(h.flags) {
			// Writeback is done before RELEASE: give back what the
			// appends preallocated, as XFS trims EOF blocks at close.
			n.fs.Store.TrimPrealloc(n.in)
		}
		n.closed(h)
		n.fs.Store.Release(n.in)
	}
	return 0
}

// Allocate implements gofs.NodeAllocater (fallocate).
func (n *Node) Allocate(ctx context.Context, f gofs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	return errno(n.fs.Store.Fallocate(n.in, int64(off), int64(size), mode))
}

// Lseek implements gofs.NodeLseeker (SEEK_DATA and SEEK_HOLE).
func (n *Node) Lseek(ctx context.Context, f gofs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	if whence != meta.SeekData && whence != meta.SeekHole {
		return 0, syscall.EINVAL
	}
	// The kernel passes a negative offset through; like XFS, there is no
	// data or hole before the start of the file.
	if int64(off) < 0 {
		return 0, syscall.ENXIO
	}
	n.writeBackCached(int64(off))
	o, err := n.fs.Store.Seek(n.in, int64(off), int(whence))
	if err != nil {
		return 0, errno(err)
	}
	return uint64(o), 0
}

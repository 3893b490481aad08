package fs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
)

// syncWritesFS makes O_SYNC and O_DSYNC writes durable before they are
// answered. The kernel sends an FSYNC after such a write only when it went
// through the page cache (generic_write_sync); a direct write (a
// FOPEN_DIRECT_IO handle, and so every O_DIRECT open, AIO included) gets
// none, and instead carries the flags in the WRITE itself (fuse_write_in
// flags: the file's f_flags plus O_DSYNC/O_SYNC for RWF_DSYNC/RWF_SYNC).
// So the daemon commits here, as fsync does: the data, and with the whole
// journal the metadata that reaches it, the file's creation and name
// included.
type syncWritesFS struct {
	fuse.RawFileSystem
	fs *FS
}

// Write implements fuse.RawFileSystem.
func (s syncWritesFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	n, st := s.RawFileSystem.Write(cancel, in, data)
	return n, s.sync(in, n, st)
}

// Writev implements fuse.RawFileSystem; on ENOSYS go-fuse retries with
// Write, which syncs then.
func (s syncWritesFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := s.RawFileSystem.Writev(cancel, in, data)
	return n, s.sync(in, n, st)
}

// sync commits after a successful synchronous write; a failed commit fails
// the write (EIO), as it would fail fsync. O_SYNC includes O_DSYNC's bit.
func (s syncWritesFS) sync(in *fuse.WriteIn, n uint32, st fuse.Status) fuse.Status {
	if st != fuse.OK || n == 0 || in.Flags&syscall.O_DSYNC == 0 {
		return st
	}
	ino := s.fs.Store.Get(in.NodeId)
	if ino == nil {
		return fuse.EIO
	}
	if err := s.fs.Store.Fsync(ino); err != nil {
		if s.fs.Log != nil {
			s.fs.Log.Debug("O_SYNC write: commit failed", zap.Uint64("ino", in.NodeId), zap.Error(err))
		}
		return fuse.Status(errno(err))
	}
	return fuse.OK
}

package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/meta"
)

// The kernel caches entries, attributes and negative lookups for
// cacheTimeout. Whatever the kernel does itself (create, unlink, rename,
// link, setattr, write, xattrs) it accounts for in its own caches; what
// the daemon changes on its own (a stream set by ioctl moves ctime; any
// attribute a background task changes) must be told to the kernel here,
// or a stat would show the old value for an hour.

// setServer records the FUSE server for notifications.
func (f *FS) setServer(srv *fuse.Server, transport string) {
	f.srvMu.Lock()
	f.srv = srv
	f.transport = transport
	f.srvMu.Unlock()
}

// Transport names the FUSE transport of the mount ("classic" or io_uring
// with its rings' shape).
func (f *FS) Transport() string {
	f.srvMu.Lock()
	defer f.srvMu.Unlock()
	return f.transport
}

func (f *FS) server() *fuse.Server {
	f.srvMu.Lock()
	defer f.srvMu.Unlock()
	return f.srv
}

// InvalidateAttr tells the kernel that in's attributes changed behind its
// back; its next stat asks the daemon. Node ids are inode numbers
// (ExternalNodeID), so this needs no go-fuse inode. Attribute-only
// invalidation takes no kernel inode lock, so it is safe inside a request.
func (f *FS) InvalidateAttr(in *meta.Inode) {
	srv := f.server()
	if srv == nil {
		return
	}
	// ENOENT: the kernel does not have the inode cached; nothing to do.
	if st := srv.InodeNotify(in.Ino(), -1, 0); st != fuse.OK && st != fuse.ENOENT && f.Log != nil {
		f.Log.Debug("attribute invalidation", zap.Uint64("ino", in.Ino()), zap.String("status", st.String()))
	}
}

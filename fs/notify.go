package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/meta"
)

// The kernel caches entries, attributes and negative lookups for
// cacheTimeout. Whatever the kernel does itself (create, unlink, rename,
// link, setattr, write, xattrs) it accounts for in its own caches; what
// the daemon changes on its own — a stream set by ioctl moves ctime, a
// writeback context settles a file's block count — must be told to the
// kernel here, or a stat would show the old value for an hour.

// setServer records the FUSE server for notifications.
func (f *FS) setServer(srv *fuse.Server) {
	f.srvMu.Lock()
	f.srv = srv
	f.srvMu.Unlock()
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

// InvalidateEntry tells the kernel that name in directory dir changed
// behind its back (a positive or negative dentry it may hold). The kernel
// takes the directory's lock for this, so it runs in its own goroutine: a
// request on that directory may be the caller.
func (f *FS) InvalidateEntry(dir *meta.Inode, name string) {
	srv := f.server()
	if srv == nil {
		return
	}
	ino := dir.Ino()
	go func() {
		if st := srv.EntryNotify(ino, name); st != fuse.OK && st != fuse.ENOENT && f.Log != nil {
			f.Log.Debug("entry invalidation", zap.Uint64("dir", ino), zap.String("name", name), zap.String("status", st.String()))
		}
	}()
}

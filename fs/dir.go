package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/streamfs/streamfs/fs/meta"
)

// Readdir cookies. The store orders a directory by name hash
// (meta.DirEntry.Off, in [1, 2^62]) and can resume at any hash, so a cookie
// is a position, not an index: it survives entries added or removed
// elsewhere in the directory, and telldir/seekdir work without a list.
//
//	0        the start: ".", then "..", then the entries
//	1        after ".": "..", then the entries
//	h+2      after the entry with hash h: the entries with hash > h
//
// ".." ends at cookie 2, which is "entries with hash >= 1", i.e. all of
// them. Two names with the same 62-bit hash share a cookie; only a seek
// between the two could skip the second (as with ext4's hashed readdir).
const (
	cookieDot    = 1
	cookieDotDot = 2
)

// dirBatch is how many entries one store call returns: a 1M-entry
// directory streams in batches instead of one list in memory.
const dirBatch = 512

// dirHandle is an open directory. It implements go-fuse's file-level
// directory interfaces so that READDIRPLUS can attach attributes straight
// from the entry's inode number (no second name lookup), and seeks go to
// store positions.
//
// go-fuse serialises calls on one handle (its per-handle mutex), so the
// fields need no lock of their own.
type dirHandle struct {
	n   *Node
	pos uint64 // cookie of the next entry to return

	buf  []meta.DirEntry // the current batch from the store
	i    int             // next entry in buf
	more bool            // the store has entries after buf
	last meta.DirEntry   // the entry Readdirent returned last (for Lookup)
	// ver is the directory's (mtime, ctime) just before buf was read:
	// every create, unlink, rename or link in it moves both, so an equal
	// pair means the batch still names the same inodes.
	ver [2]int64
}

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileLookuper)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
	_ = (gofs.NodeOpendirHandler)((*Node)(nil))
)

// OpendirHandle implements gofs.NodeOpendirHandler. FOPEN_CACHE_DIR lets
// the kernel keep the listing in its page cache: every change to a
// directory goes through the kernel, which drops that cache itself. As for
// files (cacheOpenFlags), not when this listing must update atime: a
// listing served from the cache never reaches the daemon.
func (n *Node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if !n.in.IsDir() {
		return nil, 0, syscall.ENOTDIR
	}
	var fl uint32
	if !n.fs.atimeDue(n.in) {
		fl = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return &dirHandle{n: n}, fl, 0
}

// Readdirent implements gofs.FileReaddirenter: the next entry, nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	a := d.n.in.Attr()
	switch d.pos {
	case 0:
		// A listing from the start is an access (relatime decides).
		d.n.fs.touchAtime(d.n.in)
		d.pos = cookieDot
		return &fuse.DirEntry{Name: ".", Ino: a.Ino, Mode: syscall.S_IFDIR, Off: cookieDot}, 0
	case cookieDot:
		d.pos = cookieDotDot
		parent := a.Parent
		if parent == 0 {
			parent = a.Ino
		}
		return &fuse.DirEntry{Name: "..", Ino: parent, Mode: syscall.S_IFDIR, Off: cookieDotDot}, 0
	}
	if d.i >= len(d.buf) {
		if d.buf != nil && !d.more {
			return nil, 0
		}
		a := d.n.in.Attr() // before the entries: a change in between shows as a new version
		d.ver = [2]int64{a.Mtime, a.Ctime}
		ents, more, err := d.n.fs.Store.ReaddirFrom(d.n.in, d.pos-1, dirBatch)
		if err != nil {
			return nil, errno(err)
		}
		d.buf, d.i, d.more = ents, 0, more
		if len(ents) == 0 {
			d.more = false
			return nil, 0
		}
	}
	e := d.buf[d.i]
	d.i++
	d.pos = e.Off + 2
	d.last = e
	return &fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: d.pos}, 0
}

// Seekdir implements gofs.FileSeekdirer (seekdir, rewinddir, and a
// READDIR at an offset other than where the last one stopped).
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off >= 1<<63 {
		return syscall.EINVAL
	}
	d.pos = off
	d.buf, d.i, d.more = nil, 0, false
	return 0
}

// Lookup implements gofs.FileLookuper: READDIRPLUS's attributes for the
// entry Readdirent just returned, by its inode number — unless the
// directory changed since the batch was read (a batch outlives one
// READDIRPLUS request, and a rename between two could point the name at
// another inode: the kernel would cache the old one for an hour). Then
// the name is looked up afresh.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	a := d.n.in.Attr()
	if name != d.last.Name || d.last.Ino == 0 || d.ver != [2]int64{a.Mtime, a.Ctime} {
		return d.n.Lookup(ctx, name, out)
	}
	if ch := d.n.GetChild(name); ch != nil {
		// The kernel's node for the name: no inode table lookup.
		if cn, ok := ch.Operations().(*Node); ok && cn.in.Ino() == d.last.Ino && cn.in.Attr().Nlink != 0 {
			fillAttr(d.n.fs, cn.in, &out.Attr)
			return ch, 0
		}
	}
	in := d.n.fs.Store.Get(d.last.Ino)
	if in == nil || in.Attr().Nlink == 0 {
		// Removed since the batch was read: no attributes, which the
		// kernel takes as "look it up yourself".
		return nil, syscall.ENOENT
	}
	return d.n.child(ctx, in, out), 0
}

// Releasedir implements gofs.FileReleasedirer; the handle holds nothing
// that outlives it.
func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {}

// Package fs is the FUSE face of streamfs: go-fuse nodes that translate
// requests into calls on the filesystem core (package meta) and turn its
// errors into errno values. Nothing below this package knows about FUSE.
package fs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
	"github.com/streamfs/streamfs/fs/rules"
)

// FS is the state every node shares.
type FS struct {
	Store *meta.Store
	Log   *zap.Logger
	// PlacementCache is reported by stats.
	PlacementCache bool
	// Atime is the mount's access-time policy (relatime by default).
	Atime AtimeMode
	// Rules give new regular files a stream by name (nil: none).
	Rules *rules.Set

	srvMu sync.Mutex   // guards srv (set once the mount is up)
	srv   *fuse.Server // for notifications (notify.go)
	ops   opCounts     // FUSE requests served, by opcode (stats)
	nodes nodeSet      // nodes the kernel holds, bounded (nodes.go)
	drops atomic.Int32 // page-cache invalidations under way (cache.go)

	transport string // the FUSE transport, for stats (transport.go); guarded by srvMu
	// cachedFiles counts nodes with the cached mark (cache.go): while any
	// has it, a WRITE over io_uring may wait for the kernel and leaves the
	// ring's thread (transport.go).
	cachedFiles atomic.Int64
}

// Node is one file, directory or symlink.
type Node struct {
	gofs.Inode
	fs    *FS
	in    *meta.Inode
	links nodeLinks // place in fs.nodes

	// Page-cache state, for cache.go. writers counts the open handles that
	// can write: while there is one, the kernel may hold dirty pages the
	// daemon has not seen (the last close writes them back before
	// RELEASE). buffered counts the open handles that are not direct (only
	// they fill the page cache), and cached is set while the kernel may
	// hold pages of the file; cacheMu orders setting and clearing it.
	writers  atomic.Int32
	buffered atomic.Int32
	cached   atomic.Bool
	cacheMu  sync.Mutex

	qmu   sync.Mutex // guards the query snapshot below
	qkind uint32
	qdoc  []byte
}

// One interface per capability, as go-fuse's own fs package does.
var (
	_ = (gofs.NodeGetattrer)((*Node)(nil))
	_ = (gofs.NodeSetattrer)((*Node)(nil))
	_ = (gofs.NodeLookuper)((*Node)(nil))
	_ = (gofs.NodeMkdirer)((*Node)(nil))
	_ = (gofs.NodeMknoder)((*Node)(nil))
	_ = (gofs.NodeCreater)((*Node)(nil))
	_ = (gofs.NodeSymlinker)((*Node)(nil))
	_ = (gofs.NodeReadlinker)((*Node)(nil))
	_ = (gofs.NodeLinker)((*Node)(nil))
	_ = (gofs.NodeUnlinker)((*Node)(nil))
	_ = (gofs.NodeRmdirer)((*Node)(nil))
	_ = (gofs.NodeRenamer)((*Node)(nil))
	_ = (gofs.NodeOpener)((*Node)(nil))
	_ = (gofs.NodeReader)((*Node)(nil))
	_ = (gofs.NodeWriter)((*Node)(nil))
	_ = (gofs.NodeFsyncer)((*Node)(nil))
	_ = (gofs.NodeFlusher)((*Node)(nil))
	_ = (gofs.NodeReleaser)((*Node)(nil))
	_ = (gofs.NodeAllocater)((*Node)(nil))
	_ = (gofs.NodeLseeker)((*Node)(nil))
	_ = (gofs.NodeStatfser)((*Node)(nil))
	_ = (gofs.NodeGetxattrer)((*Node)(nil))
	_ = (gofs.NodeSetxattrer)((*Node)(nil))
	_ = (gofs.NodeRemovexattrer)((*Node)(nil))
	_ = (gofs.NodeListxattrer)((*Node)(nil))
	_ = (gofs.NodeIoctler)((*Node)(nil))
	_ = (gofs.NodeLookupNoder)((*Node)(nil))
	_ = (gofs.NodeLookupParenter)((*Node)(nil))
	_ = (gofs.NodeOnForgetter)((*Node)(nil))
)

// nameMax is NAME_MAX: the kernel passes FUSE any name under 4096 bytes,
// so the daemon answers ENAMETOOLONG as a kernel filesystem would.
const nameMax = 255

// checkName returns ENAMETOOLONG for a name longer than NAME_MAX.
func checkName(names ...string) syscall.Errno {
	for _, n := range names {
		if len(n) > nameMax {
			return syscall.ENAMETOOLONG
		}
	}
	return 0
}

// NewRoot returns the root node.
func NewRoot(f *FS) *Node { return &Node{fs: f, in: f.Store.Root()} }

// errno maps core errors to the errno FUSE returns.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, meta.ErrJournalFailed) {
		return syscall.EIO // shut down after a metadata write error
	}
	return syscall.EIO
}

func callerPID(ctx context.Context) uint32 {
	if c, ok := ctx.(*fuse.Context); ok {
		return c.Pid
	}
	return 0
}

func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := ctx.(*fuse.Context); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

func fillAttr(f *FS, in *meta.Inode, out *fuse.Attr) {
	a := in.Attr()
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = in.Blocks() * uint64(f.Store.Super().BlockSize) / 512
	out.Blksize = f.Store.Super().BlockSize
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = a.Rdev
	out.Atime, out.Atimensec = uint64(a.Atime/1e9), uint32(a.Atime%1e9)
	out.Mtime, out.Mtimensec = uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Ctime, out.Ctimensec = uint64(a.Ctime/1e9), uint32(a.Ctime%1e9)
}

func (n *Node) child(ctx context.Context, in *meta.Inode, out *fuse.EntryOut) *gofs.Inode {
	fillAttr(n.fs, in, &out.Attr)
	a := in.Attr()
	nn := &Node{fs: n.fs, in: in}
	ch := n.NewInode(ctx, nn, stableAttr(a))
	if ch.Operations() == nn {
		n.fs.nodes.add(nn)
	} else if c, ok := ch.Operations().(*Node); ok {
		c.touch() // the kernel had forgotten it, or another name
	}
	return ch
}

// known returns the node the kernel already holds for in under name, with
// its attributes in out, or nil. A LOOKUP or READDIRPLUS entry of a name
// the kernel knows (every `ls -l` after a create) then reuses that node
// instead of building one for go-fuse to find it already registered and
// throw away.
func (n *Node) known(name string, in *meta.Inode, out *fuse.EntryOut) *gofs.Inode {
	ch := n.GetChild(name)
	if ch == nil {
		return nil
	}
	if cn, ok := ch.Operations().(*Node); !ok || cn.in != in {
		return nil
	}
	fillAttr(n.fs, in, &out.Attr)
	return ch
}

// stableAttr identifies an inode to the kernel: the node id is the inode
// number (Options.ExternalNodeID) and the generation goes into file
// handles, so a handle stays valid across remounts.
func stableAttr(a format.InodeRec) gofs.StableAttr {
	return gofs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: a.Ino, Gen: uint64(a.Gen)}
}

// LookupNode implements gofs.NodeLookupNoder (called on the root): the
// kernel resolves a file handle whose inode left its cache, or predates
// this mount, by inode number; it then checks the generation itself.
func (n *Node) LookupNode(ctx context.Context, id uint64, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	in := n.fs.Store.Get(id)
	if in == nil || in.Attr().Nlink == 0 {
		return nil, syscall.ESTALE
	}
	return n.child(ctx, in, out), 0
}

// LookupParent implements gofs.NodeLookupParenter: reconnecting a
// directory handle walks up by "..".
func (n *Node) LookupParent(ctx context.Context, out *fuse.EntryOut) (*gofs.Inode, string, syscall.Errno) {
	a := n.in.Attr()
	p := n.fs.Store.Get(a.Parent)
	if p == nil || !p.IsDir() {
		return nil, "", syscall.ESTALE
	}
	// Walk the parent in batches: a huge directory is not listed whole.
	for off := uint64(0); ; {
		ents, more, err := n.fs.Store.ReaddirFrom(p, off, dirBatch)
		if err != nil {
			return nil, "", errno(err)
		}
		for _, e := range ents {
			if e.Ino == a.Ino {
				return n.child(ctx, p, out), e.Name, 0
			}
		}
		if !more || len(ents) == 0 {
			return nil, "", syscall.ESTALE
		}
		off = ents[len(ents)-1].Off + 1
	}
}

// Getattr implements gofs.NodeGetattrer.
func (n *Node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.touch()
	fillAttr(n.fs, n.in, &out.Attr)
	return 0
}

// Setattr implements gofs.NodeSetattrer.
func (n *Node) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.touch()
	var a meta.SetAttr
	if m, ok := in.GetMode(); ok {
		a.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		a.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		a.GID = &g
	}
	if sz, ok := in.GetSize(); ok {
		a.Size = &sz
	}
	if t, ok := in.GetATime(); ok {
		v := t.UnixNano()
		a.Atime = &v
	}
	if t, ok := in.GetMTime(); ok {
		v := t.UnixNano()
		a.Mtime = &v
	}
	if t, ok := in.GetCTime(); ok { // writeback cache: the kernel's ctime
		v := t.UnixNano()
		a.Ctime = &v
	}
	// The kernel stamps mtime with its coarse clock, up to a tick behind
	// the daemon's: the first mtime it writes back for a new file can be
	// a little before the atime the daemon gave it at create, and relatime
	// would then skip the first read. A never-read file's atime follows
	// the kernel's clock down; a deliberate older time (touch -m -d) is
	// further back than any clock tick and leaves atime alone.
	if a.Mtime != nil && a.Atime == nil {
		cur := n.in.Attr()
		if d := cur.Atime - *a.Mtime; cur.Atime == cur.Btime && d > 0 && d <= int64(kernelClockLag) {
			a.Atime = a.Mtime
		}
	}
	// With HANDLE_KILLPRIV_V2 the kernel asks us to drop setuid/setgid.
	a.KillSUID = in.Valid&fuse.FATTR_KILL_SUIDGID != 0
	if err := n.fs.Store.Setattr(n.in, a); err != nil {
		// With the writeback cache the kernel writes an inode's cached
		// times back after its last close, also when the file was just
		// unlinked and freed; an error here would surface as a false
		// failure of the next syncfs(2). Times of a file that is gone
		// have nowhere to go: accept them.
		if !errors.Is(err, syscall.ENOENT) || !onlyTimes(in.Valid) {
			return errno(err)
		}
	}
	fillAttr(n.fs, n.in, &out.Attr)
	// go-fuse leaves a SETATTR reply's validity at 0, which made the kernel
	// ask again (GETATTR) at the next open or stat after every chmod or
	// utimes — one more round trip per `touch`.
	out.SetTimeout(cacheTimeout)
	return 0
}

// kernelClockLag bounds how far the kernel's coarse clock (one tick, at
// most 10 ms at HZ=100) trails the daemon's, with room for scheduling.
const kernelClockLag = time.Second

// onlyTimes reports whether a SETATTR's valid bits carry nothing but
// times (and the handle or lock owner they came through).
func onlyTimes(valid uint32) bool {
	const times = fuse.FATTR_ATIME | fuse.FATTR_MTIME | fuse.FATTR_CTIME |
		fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW | fuse.FATTR_FH | fuse.FATTR_LOCKOWNER
	return valid&^times == 0
}

// Lookup implements gofs.NodeLookuper.
func (n *Node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, e
	}
	in, err := n.fs.Store.Lookup(n.in, name)
	if err != nil {
		return nil, errno(err)
	}
	if ch := n.known(name, in, out); ch != nil {
		return ch, 0
	}
	return n.child(ctx, in, out), 0
}

func (n *Node) create(ctx context.Context, name string, ni meta.NewInode, out *fuse.EntryOut) (*gofs.Inode, *meta.Inode, syscall.Errno) {
	if e := checkName(name); e != 0 {
		return nil, nil, e
	}
	ni.UID, ni.GID = caller(ctx)
	in, err := n.fs.Store.Create(n.in, name, ni)
	if err != nil {
		return nil, nil, errno(err)
	}
	return n.child(ctx, in, out), in, 0
}

// Mkdir implements gofs.NodeMkdirer.
func (n *Node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	mode, umask := splitUmask(mode)
	ch, _, e := n.create(ctx, name, meta.NewInode{Mode: syscall.S_IFDIR | mode&0o7777, Umask: umask}, out)
	return ch, e
}

// Mknod implements gofs.NodeMknoder.
func (n *Node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	mode, umask := splitUmask(mode)
	ni := meta.NewInode{Mode: mode, Rdev: dev, Umask: umask}
	if mode&syscall.S_IFMT == syscall.S_IFREG {
		ni.RuleStream = n.fs.Rules.Match(name)
	}
	ch, _, e := n.create(ctx, name, ni, out)
	return ch, e
}

// Symlink implements gofs.NodeSymlinker.
func (n *Node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch, _, e := n.create(ctx, name, meta.NewInode{Mode: syscall.S_IFLNK | 0o777, Target: target}, out)
	return ch, e
}

// Readlink implements gofs.NodeReadlinker.
func (n *Node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	a := n.in.Attr()
	if a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, syscall.EINVAL
	}
	return []byte(a.Target), 0
}

// Create implements gofs.NodeCreater.
func (n *Node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	mode, umask := splitUmask(mode)
	ch, in, e := n.create(ctx, name, meta.NewInode{Mode: syscall.S_IFREG | mode&0o7777, Umask: umask, RuleStream: n.fs.Rules.Match(name)}, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	h, fl, e := n.fs.openHandle(in, flags)
	if e == 0 {
		if cn, ok := ch.Operations().(*Node); ok {
			cn.opened(h)
		}
	}
	return ch, h, fl, e
}

// Link implements gofs.NodeLinker.
func (n *Node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, ok := target.(*Node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if e := checkName(name); e != 0 {
		return nil, e
	}
	if err := n.fs.Store.Link(n.in, name, t.in); err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, t.in, out), 0
}

// Unlink implements gofs.NodeUnlinker.
func (n *Node) Unlink(ctx context.Context, name string) syscall.Errno {
	if e := checkName(name); e != 0 {
		return e
	}
	return errno(n.fs.Store.Remove(n.in, name, false))
}

// Rmdir implements gofs.NodeRmdirer.
func (n *Node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := checkName(name); e != 0 {
		return e
	}
	return errno(n.fs.Store.Remove(n.in, name, true))
}

// Rename implements gofs.NodeRenamer (RENAME_NOREPLACE and RENAME_EXCHANGE too).
func (n *Node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*Node)
	if !ok {
		return syscall.EXDEV
	}
	if e := checkName(name, newName); e != 0 {
		return e
	}
	return errno(n.fs.Store.Rename(n.in, name, np.in, newName, flags))
}

// Statfs implements gofs.NodeStatfser.
func (n *Node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st := n.fs.Store.Statfs()
	out.Bsize = uint32(st.BlockSize)
	out.Frsize = uint32(st.BlockSize)
	out.Blocks = st.Blocks
	out.Bfree = st.Free
	out.Bavail = st.Free
	out.Files = st.Files
	out.Ffree = st.FilesFree
	out.NameLen = st.NameLen
	return 0
}

// cacheTimeout is how long the kernel may trust entries, attributes and
// negative lookups. streamfs holds its device exclusively and every change
// the kernel did not make itself is notified (notify.go), so nothing goes
// stale behind the kernel's back: an hour turns a stat, ls -l or repeated
// open into no request at all.
const cacheTimeout = time.Hour

// cacheOpenFlags are the FOPEN_ flags of a file open that the name and
// attribute caching allows.
//
// KEEP_CACHE: every write reaches the file through the kernel (a direct
// write drops the pages it overwrites, cache.go), so an open need not drop the
// file's cached pages — unless the next read must update atime: a read
// served from the page cache never reaches the daemon, which keeps atime
// (the kernel marks FUSE inodes S_NOATIME). So strictatime never keeps the
// cache, relatime keeps it once atime is fresh, noatime always does.
//
// NOFLUSH for a read-only open: close has no write error to report for it,
// so the kernel skips the FLUSH round trip. A writer keeps FLUSH (close
// reports a failed write, README), and with the writeback cache the kernel
// flushes anyway.
func (f *FS) cacheOpenFlags(in *meta.Inode, flags uint32) uint32 {
	var fl uint32
	if !f.atimeDue(in) {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		fl |= fuse.FOPEN_NOFLUSH
	}
	return fl
}

// atimeDue reports whether an access to in now would update its atime.
func (f *FS) atimeDue(in *meta.Inode) bool {
	if f.Atime == AtimeNone || f.Store.ReadOnly() {
		return false
	}
	a := in.Attr()
	return needAtime(f.Atime, a.Atime, a.Mtime, a.Ctime, time.Now().UnixNano())
}

package fs

import (
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// FUSE requests served, by kind: `streamfs stats` shows them, and the
// tests count the round trips of an ls -l or a create with them.
const (
	opLookup = iota
	opForget
	opGetattr
	opSetattr
	opAccess
	opMknod
	opMkdir
	opSymlink
	opReadlink
	opLink
	opUnlink
	opRmdir
	opRename
	opCreate
	opOpen
	opRead
	opWrite
	opFlush
	opFsync
	opRelease
	opOpendir
	opReaddir
	opReaddirplus
	opReleasedir
	opGetxattr
	opListxattr
	opSetxattr
	opStatx
	opCount
)

var opNames = [opCount]string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "ACCESS", "MKNOD", "MKDIR", "SYMLINK", "READLINK",
	"LINK", "UNLINK", "RMDIR", "RENAME", "CREATE", "OPEN", "READ", "WRITE", "FLUSH", "FSYNC",
	"RELEASE", "OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR", "GETXATTR", "LISTXATTR",
	"SETXATTR", "STATX",
}

// opCounts is one counter per request kind; no lock.
type opCounts [opCount]atomic.Uint64

// FuseOps returns the requests served since mount, by opcode name
// (kinds never seen are left out).
func (f *FS) FuseOps() map[string]uint64 {
	m := make(map[string]uint64)
	for i := range f.ops {
		if v := f.ops[i].Load(); v != 0 {
			m[opNames[i]] = v
		}
	}
	return m
}

// countingFS counts requests on their way to go-fuse's node bridge; every
// method it does not name passes through uncounted.
type countingFS struct {
	fuse.RawFileSystem
	c *opCounts
}

func (c countingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	c.c[opLookup].Add(1)
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

func (c countingFS) Forget(nodeid, nlookup uint64) {
	c.c[opForget].Add(1)
	c.RawFileSystem.Forget(nodeid, nlookup)
}

func (c countingFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	c.c[opGetattr].Add(1)
	return c.RawFileSystem.GetAttr(cancel, in, out)
}

func (c countingFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	c.c[opSetattr].Add(1)
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c countingFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	c.c[opAccess].Add(1)
	return c.RawFileSystem.Access(cancel, in)
}

func (c countingFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	c.c[opMknod].Add(1)
	return c.RawFileSystem.Mknod(cancel, in, name, out)
}

func (c countingFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	c.c[opMkdir].Add(1)
	return c.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (c countingFS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	c.c[opSymlink].Add(1)
	return c.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (c countingFS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	c.c[opReadlink].Add(1)
	return c.RawFileSystem.Readlink(cancel, h)
}

func (c countingFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	c.c[opLink].Add(1)
	return c.RawFileSystem.Link(cancel, in, name, out)
}

func (c countingFS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	c.c[opUnlink].Add(1)
	return c.RawFileSystem.Unlink(cancel, h, name)
}

func (c countingFS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	c.c[opRmdir].Add(1)
	return c.RawFileSystem.Rmdir(cancel, h, name)
}

func (c countingFS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	c.c[opRename].Add(1)
	return c.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (c countingFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	c.c[opCreate].Add(1)
	return c.RawFileSystem.Create(cancel, in, name, out)
}

func (c countingFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c.c[opOpen].Add(1)
	return c.RawFileSystem.Open(cancel, in, out)
}

func (c countingFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	c.c[opRead].Add(1)
	return c.RawFileSystem.Read(cancel, in, buf)
}

func (c countingFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	c.c[opWrite].Add(1)
	return c.RawFileSystem.Write(cancel, in, data)
}

// Writev is tried first for WRITE; on ENOSYS go-fuse falls back to Write,
// which counts it then.
func (c countingFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := c.RawFileSystem.Writev(cancel, in, data)
	if st != fuse.ENOSYS {
		c.c[opWrite].Add(1)
	}
	return n, st
}

func (c countingFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	c.c[opFlush].Add(1)
	return c.RawFileSystem.Flush(cancel, in)
}

func (c countingFS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	c.c[opFsync].Add(1)
	return c.RawFileSystem.Fsync(cancel, in)
}

func (c countingFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	c.c[opRelease].Add(1)
	c.RawFileSystem.Release(cancel, in)
}

func (c countingFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c.c[opOpendir].Add(1)
	return c.RawFileSystem.OpenDir(cancel, in, out)
}

func (c countingFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c.c[opReaddir].Add(1)
	return c.RawFileSystem.ReadDir(cancel, in, out)
}

func (c countingFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c.c[opReaddirplus].Add(1)
	return c.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (c countingFS) ReleaseDir(in *fuse.ReleaseIn) {
	c.c[opReleasedir].Add(1)
	c.RawFileSystem.ReleaseDir(in)
}

func (c countingFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	c.c[opGetxattr].Add(1)
	return c.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (c countingFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	c.c[opListxattr].Add(1)
	return c.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (c countingFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	c.c[opSetxattr].Add(1)
	return c.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (c countingFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	c.c[opStatx].Add(1)
	return c.RawFileSystem.Statx(cancel, in, out)
}

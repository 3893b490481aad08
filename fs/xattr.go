package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/fs/meta"
)

// xattrSELinux is the SELinux label. The daemon never stores it: with
// SELinux active the kernel labels a FUSE mount from policy (genfscon) and
// answers this name itself without asking; with no LSM there is nothing
// to store.
const xattrSELinux = "security.selinux"

// xattrUnsupported reports the names answered EOPNOTSUPP before the store
// is asked: the SELinux label always, and the POSIX ACLs with noacl (the
// default, ext4's convention). EOPNOTSUPP rather than "no such
// attribute": coreutils then remembers per device that the filesystem
// has no ACLs and no labels, and `ls -l` stops sending two GETXATTR per
// file. Never ENOSYS, which would turn off every xattr of the connection.
func (f *FS) xattrUnsupported(name string) bool {
	return name == xattrSELinux || (meta.IsACLName(name) && !f.Store.ACL())
}

// Getxattr implements gofs.NodeGetxattrer.
func (n *Node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if n.fs.xattrUnsupported(attr) {
		return 0, syscall.EOPNOTSUPP
	}
	v, err := n.fs.Store.Getxattr(n.in, attr)
	if err != nil {
		return 0, errno(err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

// Setxattr implements gofs.NodeSetxattrer. flags may carry
// meta.XattrKillSGID (aclFS).
func (n *Node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if n.fs.xattrUnsupported(attr) {
		return syscall.EOPNOTSUPP
	}
	return errno(n.fs.Store.Setxattr(n.in, attr, data, flags))
}

// Removexattr implements gofs.NodeRemovexattrer.
func (n *Node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if n.fs.xattrUnsupported(attr) {
		return syscall.EOPNOTSUPP
	}
	return errno(n.fs.Store.Removexattr(n.in, attr))
}

// Listxattr implements gofs.NodeListxattrer.
func (n *Node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, err := n.fs.Store.Listxattr(n.in)
	if err != nil {
		return 0, errno(err)
	}
	var b []byte
	for _, name := range names {
		b = append(append(b, name...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

// With -o acl the kernel enforces POSIX ACLs (FUSE_POSIX_ACL) and the
// mount passes MS_POSIXACL, so the kernel leaves the umask to the daemon:
// a directory's default ACL replaces it (meta.Store.inheritACL). go-fuse's
// node API does not carry the umask, nor SETXATTR's "clear set-group-ID"
// flag, to the node methods; aclFS carries them in bits of the mode and
// of the xattr flags that the kernel never sets.
type aclFS struct {
	fuse.RawFileSystem
}

// umaskTag marks a mode that carries the caller's umask in umaskShift's
// bits, above the file type (S_IFMT, bits 12-15).
const (
	umaskTag   = 1 << 31
	umaskShift = 16
)

func withUmask(mode, umask uint32) uint32 { return mode | umaskTag | (umask&0o777)<<umaskShift }

// splitUmask undoes withUmask: the mode and the umask (0 when the mode
// carried none: without -o acl the kernel has applied it).
func splitUmask(mode uint32) (uint32, uint32) {
	if mode&umaskTag == 0 {
		return mode, 0
	}
	return mode & 0xffff, mode >> umaskShift & 0o777
}

func (a aclFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	in.Mode = withUmask(in.Mode, in.Umask)
	return a.RawFileSystem.Create(cancel, in, name, out)
}

func (a aclFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode = withUmask(in.Mode, in.Umask)
	return a.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (a aclFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode = withUmask(in.Mode, in.Umask)
	return a.RawFileSystem.Mknod(cancel, in, name, out)
}

func (a aclFS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if in.SetXAttrFlags&fuse.SETXATTR_ACL_KILL_SGID != 0 {
		in.Flags |= meta.XattrKillSGID
	}
	return a.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

// aclMountOptions asks for kernel ACL enforcement when the store keeps
// ACLs: FUSE_POSIX_ACL, the extended SETXATTR that carries the
// set-group-ID flag, and MS_POSIXACL, with which the kernel sends the
// umask instead of applying it. MS_POSIXACL only reaches the kernel when
// go-fuse mounts directly; when it falls back to fusermount (no privilege
// to mount) the flag is lost, so FUSE_DONT_MASK says the same in INIT,
// else the kernel would apply the umask before a default ACL could
// replace it.
func (f *FS) aclMountOptions(mo *fuse.MountOptions) {
	if !f.Store.ACL() {
		return
	}
	mo.EnableAcl = true
	mo.ExtraCapabilities |= fuse.CAP_SETXATTR_EXT | fuse.CAP_DONT_MASK
	mo.DirectMountFlags |= unix.MS_POSIXACL
}

// aclRaw puts aclFS in front of raw when the store keeps ACLs.
func (f *FS) aclRaw(raw fuse.RawFileSystem) fuse.RawFileSystem {
	if !f.Store.ACL() {
		return raw
	}
	return aclFS{raw}
}

package meta

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/streamfs/streamfs/fs/format"
)

// POSIX ACLs, stored as the xattrs the kernel reads them from
// (system.posix_acl_access, system.posix_acl_default), in the kernel's
// xattr form. Only with Options.ACL: the kernel then enforces them
// (FUSE_POSIX_ACL) but leaves to the filesystem what a kernel filesystem
// does in posix_acl_create, posix_acl_chmod and posix_acl_update_mode:
// inheriting a directory's default ACL, keeping the access ACL and the
// mode in step, and storing no ACL that the mode alone expresses.
const (
	XattrACLAccess  = format.ACLAccessXattr
	XattrACLDefault = format.ACLDefaultXattr
)

// IsACLName reports whether name is one of the two POSIX ACL xattrs.
func IsACLName(name string) bool { return name == XattrACLAccess || name == XattrACLDefault }

// ACL entry tags and the xattr form (fs/format/acl.go).
const (
	aclUserObj  = format.ACLUserObj
	aclUser     = format.ACLUser
	aclGroupObj = format.ACLGroupObj
	aclGroup    = format.ACLGroup
	aclMask     = format.ACLMask
	aclOther    = format.ACLOther

	aclVersion   = format.ACLVersion
	aclEntrySize = format.ACLEntrySize
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// acl is a decoded ACL, entries in the order stored.
type acl []aclEntry

// parseACL checks an ACL xattr value as posix_acl_valid does
// (format.CheckACL) and decodes it; EINVAL if it is not valid.
func parseACL(b []byte) (acl, error) {
	if format.CheckACL(b) != nil {
		return nil, syscall.EINVAL
	}
	a := make(acl, (len(b)-4)/aclEntrySize)
	for i := range a {
		e := b[4+i*aclEntrySize:]
		a[i] = aclEntry{tag: binary.LittleEndian.Uint16(e), perm: binary.LittleEndian.Uint16(e[2:]), id: binary.LittleEndian.Uint32(e[4:])}
	}
	return a, nil
}

func (a acl) encode() []byte {
	b := make([]byte, 4+len(a)*aclEntrySize)
	binary.LittleEndian.PutUint32(b, aclVersion)
	for i, e := range a {
		p := b[4+i*aclEntrySize:]
		binary.LittleEndian.PutUint16(p, e.tag)
		binary.LittleEndian.PutUint16(p[2:], e.perm)
		binary.LittleEndian.PutUint32(p[4:], e.id)
	}
	return b
}

// find returns the entry tagged t (an owner, owning-group, mask or other
// entry: at most one of each), or nil.
func (a acl) find(t uint16) *aclEntry {
	for i := range a {
		if a[i].tag == t {
			return &a[i]
		}
	}
	return nil
}

// groupClass is the entry that stands for the mode's group bits: the mask
// if there is one, else the owning group.
func (a acl) groupClass() *aclEntry {
	if m := a.find(aclMask); m != nil {
		return m
	}
	return a.find(aclGroupObj)
}

// mode returns the permission bits the ACL implies and whether the mode
// alone says all it does (posix_acl_equiv_mode).
func (a acl) mode() (perm uint32, equiv bool) {
	perm = uint32(a.find(aclUserObj).perm)<<6 | uint32(a.groupClass().perm)<<3 | uint32(a.find(aclOther).perm)
	return perm, len(a) == 3
}

// chmod sets the entries the mode's bits stand for (posix_acl_chmod).
func (a acl) chmod(mode uint32) {
	a.find(aclUserObj).perm = uint16(mode >> 6 & 7)
	a.groupClass().perm = uint16(mode >> 3 & 7)
	a.find(aclOther).perm = uint16(mode & 7)
}

// createMasq narrows a default ACL copied to a new inode by the mode the
// creator asked for, and that mode by the ACL (posix_acl_create_masq). It
// returns the new permission bits and whether the ACL says more than them.
func (a acl) createMasq(mode uint32) (uint32, bool) {
	u, o, g := a.find(aclUserObj), a.find(aclOther), a.groupClass()
	u.perm &= uint16(mode >> 6 & 7)
	g.perm &= uint16(mode >> 3 & 7)
	o.perm &= uint16(mode & 7)
	perm, equiv := a.mode()
	return perm, !equiv
}

// inheritACL works out what a new inode gets from its directory (dir.mu
// held): its mode, and the ACL xattrs to store with it. Without a default
// ACL the umask applies; with one, the default ACL does instead (its
// access ACL, and for a directory the default ACL again).
func (s *Store) inheritACL(dir *Inode, n *NewInode) (map[string][]byte, error) {
	if !s.opts.ACL || n.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return nil, nil
	}
	v, ok, err := s.getXattr(dir, XattrACLDefault)
	if err != nil {
		return nil, err
	}
	if !ok {
		n.Mode &^= n.Umask & 0o777
		return nil, nil
	}
	def, err := parseACL(v)
	if err != nil {
		return nil, fmt.Errorf("directory %d: stored default ACL: %w", dir.attr.Ino, format.ErrCorrupt)
	}
	out := map[string][]byte{}
	if n.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		out[XattrACLDefault] = v
	}
	acc := append(acl(nil), def...)
	perm, more := acc.createMasq(n.Mode)
	n.Mode = n.Mode&^0o777 | perm
	if more {
		out[XattrACLAccess] = acc.encode()
	}
	return out, nil
}

// aclXattrSet checks an ACL set through setxattr and works out what it
// does to the inode (in.mu held): the access ACL sets the mode, and is not
// stored when the mode says it all (store false); a default ACL is only
// for directories.
func aclXattrSet(in *Inode, name string, value []byte) (mode uint32, store bool, err error) {
	a, err := parseACL(value)
	if err != nil {
		return 0, false, err
	}
	mode = in.attr.Mode
	if name == XattrACLDefault {
		if !in.IsDir() {
			return 0, false, syscall.EACCES
		}
		return mode, true, nil
	}
	perm, equiv := a.mode()
	return mode&^0o777 | perm, !equiv, nil
}

// ACL reports whether the store keeps POSIX ACLs (Options.ACL).
func (s *Store) ACL() bool { return s.opts.ACL }

package meta

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/format"
)

func aclOf(es ...aclEntry) []byte { return acl(es).encode() }

// TestParseACLRejects: what posix_acl_valid refuses is refused here too.
func TestParseACLRejects(t *testing.T) {
	u, g, o := aclEntry{tag: aclUserObj, perm: 7}, aclEntry{tag: aclGroupObj, perm: 5}, aclEntry{tag: aclOther, perm: 4}
	bad := map[string][]byte{
		"empty":          nil,
		"short":          {2, 0, 0},
		"version":        append([]byte{1, 0, 0, 0}, aclOf(u, g, o)[4:]...),
		"torn entry":     aclOf(u, g, o)[:27],
		"no other":       aclOf(u, g),
		"two owners":     aclOf(u, u, g, o),
		"named, no mask": aclOf(u, aclEntry{tag: aclUser, perm: 4, id: 9}, g, o),
		"bad tag":        aclOf(u, g, o, aclEntry{tag: 0x40}),
		"bad perm":       aclOf(u, g, aclEntry{tag: aclOther, perm: 8}),
		// posix_acl_permission reads them in this order, and an ACL read
		// back is not checked again by the kernel.
		"group before user": aclOf(u, g, aclEntry{tag: aclUser, perm: 4, id: 9}, aclEntry{tag: aclMask, perm: 7}, o),
		"mask after other":  aclOf(u, aclEntry{tag: aclUser, perm: 4, id: 9}, g, o, aclEntry{tag: aclMask, perm: 7}),
		"named, no id":      aclOf(u, aclEntry{tag: aclUser, perm: 4, id: 0xffffffff}, g, aclEntry{tag: aclMask, perm: 7}, o),
		"no entries":        aclOf(),
	}
	for name, b := range bad {
		if _, err := parseACL(b); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", name, err)
		}
	}
	if _, err := parseACL(aclOf(u, g, o)); err != nil {
		t.Errorf("minimal ACL: %v", err)
	}
	full := aclOf(u, aclEntry{tag: aclUser, perm: 4, id: 9}, aclEntry{tag: aclUser, perm: 6, id: 3}, g,
		aclEntry{tag: aclGroup, perm: 1, id: 5}, aclEntry{tag: aclMask, perm: 7}, o)
	if _, err := parseACL(full); err != nil {
		t.Errorf("ACL with named entries: %v", err)
	}
}

// TestACLStore: with Options.ACL the store keeps the access ACL and the
// mode in step both ways, drops an ACL the mode says all of, and gives a
// new inode its directory's default ACL in place of the umask, in the
// same transaction as the create (so it survives a reopen).
func TestACLStore(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 1)
	opts := testOpts()
	opts.ACL = true
	s, err := Open(fd, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	named := aclEntry{tag: aclUser, perm: 7, id: 65534}
	full := aclOf(aclEntry{tag: aclUserObj, perm: 7}, named, aclEntry{tag: aclGroupObj, perm: 7},
		aclEntry{tag: aclMask, perm: 7}, aclEntry{tag: aclOther, perm: 0})

	f, err := s.Create(s.Root(), "f", NewInode{Mode: syscall.S_IFREG | 0o644, Umask: 0o022})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Attr().Mode & 0o777; got != 0o644 {
		t.Errorf("create without a default ACL: mode %o, want 644", got)
	}
	if err := s.Setxattr(f, XattrACLAccess, full, 0); err != nil {
		t.Fatal(err)
	}
	if got := f.Attr().Mode & 0o777; got != 0o770 {
		t.Errorf("mode after setting an rwx/rwx/--- ACL: %o, want 770", got)
	}
	if err := s.Setxattr(f, XattrACLDefault, full, 0); !errors.Is(err, syscall.EACCES) {
		t.Errorf("default ACL on a file: %v, want EACCES", err)
	}
	m := uint32(0o640)
	if err := s.Setattr(f, SetAttr{Mode: &m}); err != nil {
		t.Fatal(err)
	}
	v, err := s.Getxattr(f, XattrACLAccess)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := parseACL(v)
	if a.find(aclMask).perm != 4 || a.find(aclUserObj).perm != 6 || a.find(aclOther).perm != 0 || a.find(aclUser).perm != 7 {
		t.Errorf("chmod 640 left the ACL at %+v", a)
	}
	minimal := aclOf(aclEntry{tag: aclUserObj, perm: 6}, aclEntry{tag: aclGroupObj, perm: 0}, aclEntry{tag: aclOther, perm: 0})
	if err := s.Setxattr(f, XattrACLAccess, minimal, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Getxattr(f, XattrACLAccess); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("an ACL the mode says all of was kept: %v", err)
	}
	if got := f.Attr().Mode & 0o777; got != 0o600 {
		t.Errorf("mode after a minimal ACL: %o, want 600", got)
	}
	m = syscall.S_ISGID | 0o770
	if err := s.Setattr(f, SetAttr{Mode: &m}); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(f, XattrACLAccess, full, XattrKillSGID); err != nil {
		t.Fatal(err)
	}
	if got := f.Attr().Mode & 0o7777; got != 0o770 {
		t.Errorf("an ACL set by someone outside the group: mode %o, want 770 (set-group-ID cleared)", got)
	}

	d, err := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	m = syscall.S_ISGID | 0o755
	if err := s.Setattr(d, SetAttr{Mode: &m}); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(d, XattrACLDefault, full, XattrKillSGID); err != nil {
		t.Fatal(err)
	}
	if got := d.Attr().Mode & 0o7777; got != syscall.S_ISGID|0o755 {
		t.Errorf("a default ACL set by someone outside the group: mode %o, want 2755 (only an access ACL clears set-group-ID)", got)
	}
	c, err := s.Create(d, "c", NewInode{Mode: syscall.S_IFREG | 0o666, Umask: 0o077})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := s.Create(d, "sub", NewInode{Mode: syscall.S_IFDIR | 0o777, Umask: 0o077})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Attr().Mode & 0o777; got != 0o660 {
		t.Errorf("file under a default ACL: mode %o, want 660 (the umask does not apply)", got)
	}
	if got := sub.Attr().Mode & 0o777; got != 0o770 {
		t.Errorf("directory under a default ACL: mode %o, want 770", got)
	}
	// A symbolic link gets no ACL (posix_acl_create); its mode stays 777.
	ln, err := s.Create(d, "ln", NewInode{Mode: syscall.S_IFLNK | 0o777, Target: "c", Umask: 0o077})
	if err != nil {
		t.Fatal(err)
	}
	if names, err := s.Listxattr(ln); err != nil || len(names) != 0 {
		t.Errorf("symbolic link under a default ACL: xattrs %q (%v), want none", names, err)
	}
	if got := ln.Attr().Mode & 0o777; got != 0o777 {
		t.Errorf("symbolic link under a default ACL: mode %o, want 777", got)
	}
	cIno, subIno := c.Ino(), sub.Ino()

	// Reopen: what the creates stored is on the device.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(fd, opts); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Getxattr(s.Get(subIno), XattrACLDefault); err != nil || !bytes.Equal(v, full) {
		t.Errorf("subdirectory's default ACL: %v %x", err, v)
	}
	v, err = s.Getxattr(s.Get(cIno), XattrACLAccess)
	if err != nil {
		t.Fatal(err)
	}
	a, _ = parseACL(v)
	if a.find(aclMask).perm != 6 || a.find(aclUser).perm != 7 {
		t.Errorf("inherited access ACL %+v, want the named entry kept and the mask rw-", a)
	}
	if _, err := s.Getxattr(s.Get(cIno), XattrACLDefault); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("a file got a default ACL: %v", err)
	}
}

// TestNoACLStore: without Options.ACL the ACL names are not supported and
// stored ones are not listed.
func TestNoACLStore(t *testing.T) {
	s := newTestStore(t, 64<<20)
	f, err := s.Create(s.Root(), "f", NewInode{Mode: syscall.S_IFREG | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{XattrACLAccess, XattrACLDefault} {
		if err := s.Setxattr(f, name, aclOf(aclEntry{tag: aclUserObj}, aclEntry{tag: aclGroupObj}, aclEntry{tag: aclOther}), 0); !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Errorf("set %s: %v, want EOPNOTSUPP", name, err)
		}
		if _, err := s.Getxattr(f, name); !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Errorf("get %s: %v, want EOPNOTSUPP", name, err)
		}
	}
}

// TestFsckStoredACL: an access ACL stored out of the kernel's order (which
// its permission check would misread, and which chmod then refuses as
// corruption) is reported by fsck -n and removed by fsck -y; chmod works
// on the repaired filesystem.
func TestFsckStoredACL(t *testing.T) {
	base := fsckImageN(t, 3)
	bad := aclOf(aclEntry{tag: aclUserObj, perm: 7}, aclEntry{tag: aclGroupObj, perm: 5},
		aclEntry{tag: aclUser, perm: 7, id: 65534}, aclEntry{tag: aclMask, perm: 7}, aclEntry{tag: aclOther, perm: 0})
	p := damagedCopy(t, base, false, func(s *Store) {
		if err := s.treeFor(RootIno).Put(format.XattrKey(RootIno, XattrACLAccess, 0), bad); err != nil {
			t.Fatal(err)
		}
	})
	opts := testOpts()
	opts.ACL = true
	chmod := func() error {
		fd := openImage(t, p)
		defer fd.Close()
		s, err := Open(fd, opts)
		if err != nil {
			t.Fatal(err)
		}
		m := uint32(0o750)
		err = s.Setattr(s.Root(), SetAttr{Mode: &m})
		if cerr := s.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		return err
	}
	if err := chmod(); !errors.Is(err, format.ErrCorrupt) {
		t.Fatalf("chmod with the damaged ACL: %v, want corruption", err)
	}
	fsckRepairCycle(t, p, "inode 1: stored system.posix_acl_access")
	if err := chmod(); err != nil {
		t.Fatalf("chmod after repair: %v", err)
	}
}

package format

import (
	"encoding/binary"
	"fmt"
)

// POSIX ACLs are stored as the xattrs the kernel reads them from, in the
// kernel's xattr form (include/uapi/linux/posix_acl_xattr.h): a
// little-endian version word, then entries of tag u16, perm u16, id u32.
const (
	ACLAccessXattr  = "system.posix_acl_access"
	ACLDefaultXattr = "system.posix_acl_default"

	ACLVersion    = 2
	ACLEntrySize  = 8
	ACLMaxEntries = 1024
)

// ACL entry tags (include/uapi/linux/posix_acl.h).
const (
	ACLUserObj  = 0x01
	ACLUser     = 0x02
	ACLGroupObj = 0x04
	ACLGroup    = 0x08
	ACLMask     = 0x10
	ACLOther    = 0x20
)

// aclUndefinedID is the id of the owner, owning-group, mask and other
// entries; a named entry with it maps to no user or group.
const aclUndefinedID = 0xffffffff

// CheckACL checks an ACL xattr value as the kernel's posix_acl_valid does
// with what it reads from an xattr: entries in the order owner, named
// users, owning group, named groups, mask, other; a mask whenever there
// are named entries; permissions within rwx. The kernel checks an ACL it
// is given before it reaches the daemon, but not one it reads back, and
// its permission check relies on that order.
func CheckACL(b []byte) error {
	if len(b) < 4 || (len(b)-4)%ACLEntrySize != 0 {
		return fmt.Errorf("ACL of %d bytes: %w", len(b), ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b); v != ACLVersion {
		return fmt.Errorf("ACL version %d: %w", v, ErrCorrupt)
	}
	n := (len(b) - 4) / ACLEntrySize
	if n > ACLMaxEntries {
		return fmt.Errorf("ACL of %d entries: %w", n, ErrCorrupt)
	}
	// The states of posix_acl_valid: the tag each one accepts next.
	const (
		wantUserObj = iota
		inUsers
		inGroups
		wantOther
		done
	)
	state, needsMask := wantUserObj, false
	for i := range n {
		e := b[4+i*ACLEntrySize:]
		tag, perm, id := binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])
		if perm&^7 != 0 {
			return fmt.Errorf("ACL entry %d: permissions %#o: %w", i, perm, ErrCorrupt)
		}
		ok := false
		switch tag {
		case ACLUserObj:
			ok, state = state == wantUserObj, inUsers
		case ACLUser, ACLGroup:
			ok = (tag == ACLUser && state == inUsers || tag == ACLGroup && state == inGroups) && id != aclUndefinedID
			needsMask = true
		case ACLGroupObj:
			ok, state = state == inUsers, inGroups
		case ACLMask:
			ok, state = state == inGroups, wantOther
		case ACLOther:
			ok, state = state == wantOther || state == inGroups && !needsMask, done
		}
		if !ok || i == n-1 && state != done {
			return fmt.Errorf("ACL entry %d: tag %#x out of place: %w", i, tag, ErrCorrupt)
		}
	}
	if n == 0 {
		return fmt.Errorf("ACL with no entries: %w", ErrCorrupt)
	}
	return nil
}

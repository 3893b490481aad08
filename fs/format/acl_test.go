package format

import (
	"encoding/binary"
	"testing"
)

// FuzzCheckACL: any bytes are refused with an error or accepted, never a
// panic; what is accepted has one owner, owning-group and other entry, and
// a mask whenever there is a named entry.
func FuzzCheckACL(f *testing.F) {
	entry := func(b []byte, tag, perm uint16, id uint32) []byte {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		return binary.LittleEndian.AppendUint32(b, id)
	}
	minimal := entry(entry(entry(binary.LittleEndian.AppendUint32(nil, ACLVersion), ACLUserObj, 7, aclUndefinedID), ACLGroupObj, 5, aclUndefinedID), ACLOther, 4, aclUndefinedID)
	full := binary.LittleEndian.AppendUint32(nil, ACLVersion)
	full = entry(full, ACLUserObj, 7, aclUndefinedID)
	full = entry(full, ACLUser, 6, 1000)
	full = entry(full, ACLGroupObj, 5, aclUndefinedID)
	full = entry(full, ACLGroup, 1, 100)
	full = entry(full, ACLMask, 7, aclUndefinedID)
	full = entry(full, ACLOther, 0, aclUndefinedID)
	f.Add(minimal)
	f.Add(full)
	f.Add(full[:len(full)-3])
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckACL(b) != nil {
			return
		}
		count := map[uint16]int{}
		for i := 4; i+ACLEntrySize <= len(b); i += ACLEntrySize {
			count[binary.LittleEndian.Uint16(b[i:])]++
		}
		named := count[ACLUser]+count[ACLGroup] > 0
		if count[ACLUserObj] != 1 || count[ACLGroupObj] != 1 || count[ACLOther] != 1 || count[ACLMask] > 1 || named && count[ACLMask] != 1 {
			t.Fatalf("accepted % x: entries %v", b, count)
		}
	})
}

package meta

import (
	"crypto/rand"
	"encoding/binary"
)

// newGen returns a new inode's generation: random, as XFS's
// (get_random_u32), so that a file handle (inode number and generation,
// NFS re-export) cannot be guessed from the sequential inode numbers. Never
// 0, which inodes made before generations were random carry.
func newGen() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		if g := binary.LittleEndian.Uint32(b[:]); g != 0 {
			return g
		}
	}
}

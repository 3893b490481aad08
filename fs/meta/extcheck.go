package meta

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/format"
)

// badExtent refuses an extent read from the trees whose device blocks lie
// outside the data area: a damaged or crafted image must not make file I/O
// read or write the superblocks, the checkpoint slots or the journal, nor
// a free hand metadata blocks to the allocator.
func (s *Store) badExtent(ino uint64, e Extent) error {
	if s.sb.InDataArea(e.PBlk, e.Len) {
		return nil
	}
	return fmt.Errorf("inode %d extent %d+%d at device block %d outside the data area: %w",
		ino, e.LBlk, e.Len, e.PBlk, format.ErrCorrupt)
}

// checkExtents refuses exts, ino's extents, if one is outside the data
// area (badExtent), and logs it: once per loaded inode, so that a program
// retrying a read cannot flood the log.
func (s *Store) checkExtents(ino uint64, exts []Extent) error {
	for _, e := range exts {
		if err := s.badExtent(ino, e); err != nil {
			if in := s.itab.get(ino); in == nil || !in.badExtLogged.Swap(true) {
				s.log.Error("corrupt extent refused (streamfs fsck -y drops it)", zap.Uint64("ino", ino), zapErr(err))
			}
			return err
		}
	}
	return nil
}

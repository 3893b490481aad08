package meta

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/format"
)

// checkExtent refuses an extent read from the trees whose device blocks lie
// outside the data area: a damaged or crafted image must not make file I/O
// read or write the superblocks, the checkpoint slots or the journal, nor
// a free hand metadata blocks to the allocator. It logs what it refuses.
func (s *Store) checkExtent(ino uint64, e Extent) error {
	end := e.PBlk + e.Len
	if e.Len != 0 && e.PBlk >= s.sb.MetaEnd() && end > e.PBlk && end <= s.sb.BackupBlock {
		return nil
	}
	err := fmt.Errorf("inode %d extent %d+%d at device block %d outside the data area [%d, %d): %w",
		ino, e.LBlk, e.Len, e.PBlk, s.sb.MetaEnd(), s.sb.BackupBlock, format.ErrCorrupt)
	s.log.Error("corrupt extent refused (streamfs fsck reports it)", zap.Uint64("ino", ino), zapErr(err))
	return err
}

// checkExtents is checkExtent for each of exts.
func (s *Store) checkExtents(ino uint64, exts []Extent) error {
	for _, e := range exts {
		if err := s.checkExtent(ino, e); err != nil {
			return err
		}
	}
	return nil
}

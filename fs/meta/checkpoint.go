package meta

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// A checkpoint makes the trees durable so the journal before it can be
// reused:
//
//  1. under opLock held exclusively (operations pause, for memcpy time
//     only): attributes of dirty inodes and the AG counters go into the
//     trees, node allocations are folded into the free-space records, every
//     tree's dirty nodes are encoded (tree.Snapshot) and the open journal
//     transaction is closed — the snapshot contains it;
//  2. without it: the node blocks are written, the device flushed (data and
//     nodes before the roots that reach them), the header and roots written
//     to the inactive slot, the device flushed again;
//  3. blocks the new checkpoint no longer references (old node copies,
//     data freed by the closed transaction) go back to the allocator.
//
// A failure at any step shuts the filesystem down: the old checkpoint and
// the journal after it still describe everything acknowledged.
func (j *journal) checkpointLocked() error {
	s := j.s
	if s.readOnly {
		return nil
	}
	if j.failed.Load() {
		return ErrJournalFailed
	}
	s.opLock.Lock()
	if j.failed.Load() {
		// An operation that failed half-way shut the filesystem down
		// while this checkpoint waited for opLock: the trees hold its
		// partial changes, which must never reach the media.
		s.opLock.Unlock()
		return ErrJournalFailed
	}
	paused := time.Now()
	frozen, roots, released, err := s.snapshotLocked()
	s.nodeAllocs.Store(0)
	_, _, frees, _ := j.detach(true, false) // the snapshot contains its records
	seq := j.openTx.Load()
	s.opLock.Unlock()
	held := time.Since(paused)
	s.stats.notePause(held)
	// Frozen nodes are immutable: encode them while operations go on.
	var writes []tree.BlockWrite
	for _, f := range frozen {
		writes = append(writes, f.Encode()...)
	}
	if err != nil {
		return s.shutdown(fmt.Errorf("preparing checkpoint: %w", err))
	}
	wstart := time.Now()
	if err := j.writeCheckpoint(writes, roots, seq); err != nil {
		return s.shutdown(err)
	}
	s.log.Debug("checkpoint", zap.Int("nodes", len(writes)), zap.Int("released", len(released)),
		zap.Duration("pause", held), zap.Duration("encode", wstart.Sub(paused)-held), zap.Duration("write", time.Since(wstart)))
	for _, t := range s.trees {
		t.Written()
	}
	j.ckptSeq++
	j.ckptSlot = 1 - j.ckptSlot
	j.used = 0
	if j.committed.Load() < seq {
		j.committed.Store(seq)
	}
	for _, b := range released {
		frees = append(frees, alloc.Extent{Start: b, Len: 1})
	}
	j.release(frees)
	s.stats.checkpoints.Add(1)
	var n uint64
	for _, w := range writes {
		n += uint64(len(w.Data))
	}
	s.ckptBytes.Store(n)
	return nil
}

// snapshotLocked prepares a checkpoint's writes. opLock is held exclusively.
func (s *Store) snapshotLocked() (frozen []*tree.Frozen, roots []uint64, released []uint64, err error) {
	t0 := time.Now()
	for _, in := range s.clearDirty() {
		if in.freed {
			continue
		}
		if err := s.applyInode(&in.attr); err != nil {
			return nil, nil, nil, fmt.Errorf("inode %d: %w", in.attr.Ino, err)
		}
	}
	if err := s.storeAGs(); err != nil {
		return nil, nil, nil, err
	}
	t1 := time.Now()
	if released, err = s.foldNodeSpace(); err != nil {
		return nil, nil, nil, err
	}
	t2 := time.Now()
	roots = make([]uint64, len(s.trees))
	frozen = make([]*tree.Frozen, len(s.trees))
	for ag, t := range s.trees {
		roots[ag], frozen[ag] = t.Freeze()
	}
	s.noteHeight()
	s.log.Debug("checkpoint snapshot", zap.Duration("inodes", t1.Sub(t0)), zap.Duration("fold", t2.Sub(t1)),
		zap.Duration("freeze", time.Since(t2)))
	return frozen, roots, released, nil
}

// writeCheckpoint writes the node blocks, then the header and roots to the
// inactive slot, with a header that sends replay to journal sequence seq at
// the current head.
func (j *journal) writeCheckpoint(writes []tree.BlockWrite, roots []uint64, seq uint64) error {
	s := j.s
	bs := s.bs
	slices.SortFunc(writes, func(a, b tree.BlockWrite) int {
		switch {
		case a.Blk < b.Blk:
			return -1
		case a.Blk > b.Blk:
			return 1
		}
		return 0
	})
	// Neighbouring blocks go out as one write.
	for i := 0; i < len(writes); {
		k := i + 1
		for k < len(writes) && writes[k].Blk == writes[k-1].Blk+1 && k-i < 256 {
			k++
		}
		buf := writes[i].Data
		if k-i > 1 {
			buf = make([]byte, 0, uint64(k-i)*bs)
			for _, w := range writes[i:k] {
				buf = append(buf, w.Data...)
			}
		}
		if err := s.dev.WriteAt(buf, int64(writes[i].Blk*bs), 0); err != nil {
			return fmt.Errorf("checkpoint: writing tree nodes at block %d: %w", writes[i].Blk, err)
		}
		i = k
	}
	if err := j.flush(); err != nil { // data and nodes before the roots
		return err
	}
	payload := make([]byte, 0, len(roots)*8)
	for _, r := range roots {
		payload = append(payload, put64(r)...)
	}
	slot := 1 - j.ckptSlot
	start := s.sb.CkptStart + uint64(slot)*s.sb.CkptBlocks
	h := format.CkptHeader{Seq: j.ckptSeq + 1, JournalSeq: seq, JournalPos: j.head,
		PayloadLen: uint64(len(payload)), PayloadCRC: format.Checksum(payload), UUID: s.sb.UUID}
	buf := make([]byte, s.sb.CkptBlocks*bs)
	copy(buf, h.Encode())
	copy(buf[bs:], payload)
	if err := s.dev.WriteAt(buf, int64(start*bs), 0); err != nil {
		return fmt.Errorf("checkpoint header: %w", err)
	}
	return j.flush()
}

// readCheckpoint returns the newest valid checkpoint, its slot and the AG
// tree roots it records.
func (s *Store) readCheckpoint() (*format.CkptHeader, int, []uint64, error) {
	bs := s.bs
	maxPayload := (s.sb.CkptBlocks - 1) * bs
	var best *format.CkptHeader
	var bestSlot int
	var bestRoots []uint64
	var errs []error
	var torn []*format.CkptHeader // valid headers whose roots do not verify
	for slot := 0; slot < 2; slot++ {
		start := s.sb.CkptStart + uint64(slot)*s.sb.CkptBlocks
		buf := make([]byte, s.sb.CkptBlocks*bs)
		if err := s.dev.ReadAt(buf, int64(start*bs)); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint slot %d: %w", slot, err))
			continue
		}
		h, err := format.DecodeCkptHeader(buf, s.sb.UUID, maxPayload)
		if err != nil {
			// A slot never written since mkfs is blank, not corrupt.
			if !allZero(buf[:format.CkptHeaderSize]) {
				errs = append(errs, fmt.Errorf("checkpoint slot %d: %w", slot, err))
			}
			continue
		}
		payload := buf[bs : bs+h.PayloadLen]
		if format.Checksum(payload) != h.PayloadCRC {
			errs = append(errs, fmt.Errorf("checkpoint slot %d roots checksum: %w", slot, format.ErrCorrupt))
			torn = append(torn, h)
			continue
		}
		if h.PayloadLen != uint64(s.sb.AGCount)*8 {
			errs = append(errs, fmt.Errorf("checkpoint slot %d holds %d bytes of roots for %d AGs: %w",
				slot, h.PayloadLen, s.sb.AGCount, format.ErrCorrupt))
			continue
		}
		roots := make([]uint64, s.sb.AGCount)
		bad := false
		for i := range roots {
			roots[i] = le64(payload[i*8:])
			if roots[i] != 0 && (roots[i] < s.sb.MetaEnd() || roots[i] >= s.sb.BackupBlock) {
				bad = true
			}
		}
		if bad {
			errs = append(errs, fmt.Errorf("checkpoint slot %d: a tree root outside the data area: %w", slot, format.ErrCorrupt))
			continue
		}
		if best != nil && h.Seq <= best.Seq {
			continue
		}
		best, bestSlot, bestRoots = h, slot, roots
	}
	if best == nil {
		return nil, 0, nil, fmt.Errorf("no valid checkpoint: %w", errors.Join(errs...))
	}
	if len(errs) > 0 {
		s.ckptDamage = errors.Join(errs...)
		// A crash while a checkpoint writes its slot leaves a valid header
		// (sectors land whole) over roots that do not verify. That is
		// benign when the slot is older than the one in use (it was being
		// overwritten) or when the journal still holds everything the
		// interrupted checkpoint contained; checkpointInterrupted decides
		// once the journal is replayed.
		if len(torn) == len(errs) {
			s.ckptTorn = torn
		}
		if s.log != nil {
			s.log.Warn("a checkpoint slot is damaged; using the other one (streamfs fsck reports it)", zap.Error(s.ckptDamage))
		}
	}
	return best, bestSlot, bestRoots, nil
}

// checkpointInterrupted reports whether the damaged checkpoint slot found at
// mount is what a crash during a checkpoint leaves, rather than damage: every
// damaged slot has a valid header and is older than the checkpoint in use,
// or names a journal position that the replay reached. Call after replay.
func (s *Store) checkpointInterrupted(best *format.CkptHeader) bool {
	if s.ckptTorn == nil {
		return false
	}
	for _, h := range s.ckptTorn {
		if h.Seq > best.Seq && h.JournalSeq > s.j.openTx.Load() {
			return false // it held commits the journal no longer has
		}
	}
	return true
}

func (s *Store) bumpAGNext(ino uint64) {
	ag, agino := alloc.InoAG(ino), alloc.InoAGino(ino)
	for {
		cur := s.agNext[ag].Load()
		if cur > agino || s.agNext[ag].CompareAndSwap(cur, agino+1) {
			return
		}
	}
}

// replay applies (with apply) the journal commits that follow the
// checkpoint. It returns the number of commits and records applied and
// leaves the journal head after the last good commit.
func (s *Store) replay(h *format.CkptHeader, apply func(*format.Record) error) (commits, records int, err error) {
	j := s.j
	seq, pos := h.JournalSeq, h.JournalPos
	if pos == s.sb.JournalBlocks {
		pos = 0 // written before commits ending at the journal's end wrapped the head
	}
	if pos >= s.sb.JournalBlocks {
		return 0, 0, fmt.Errorf("checkpoint journal position %d beyond journal: %w", pos, format.ErrCorrupt)
	}
	used := uint64(0)
	for {
		hdr, payload, at, ok := s.readCommit(seq, pos)
		if !ok {
			break
		}
		if at != pos {
			used += s.sb.JournalBlocks - pos
		}
		// Decode the whole commit before applying any of it: a commit is
		// applied entirely or not at all.
		var recs []*format.Record
		if err := format.DecodeRecords(payload, func(r *format.Record) error {
			recs = append(recs, r)
			return nil
		}); err != nil {
			err = fmt.Errorf("journal commit %d has valid checksums but malformed records: %w", seq, err)
			if s.badCommit == nil {
				return commits, records, fmt.Errorf("%w (streamfs fsck -y ends the journal before it)", err)
			}
			s.badCommit(err)
			break
		}
		for _, r := range recs {
			records++
			if err := apply(r); err != nil {
				return commits, records, fmt.Errorf("journal commit %d: %w", seq, err)
			}
		}
		commits++
		pos = at + uint64(hdr.Blocks)
		if pos == s.sb.JournalBlocks {
			pos = 0
		}
		used += uint64(hdr.Blocks)
		seq++
		if used >= s.sb.JournalBlocks {
			break
		}
	}
	j.head, j.used = pos, used
	j.openTx.Store(seq)
	j.committed.Store(seq)
	return commits, records, nil
}

// readCommit reads the commit with sequence seq at pos, or at 0 when it
// wrapped. ok is false when neither place holds a valid commit.
func (s *Store) readCommit(seq, pos uint64) (*format.JournalHeader, []byte, uint64, bool) {
	places := []uint64{pos, 0}
	if pos == 0 {
		places = places[:1]
	}
	for _, at := range places {
		hb := make([]byte, s.bs)
		if err := s.dev.ReadAt(hb, int64((s.sb.JournalStart+at)*s.bs)); err != nil {
			continue
		}
		h, err := format.DecodeJournalHeader(hb, s.sb.UUID, uint32(s.bs), s.sb.JournalBlocks)
		if err != nil || h.Seq != seq || at+uint64(h.Blocks) > s.sb.JournalBlocks {
			continue
		}
		payload := make([]byte, (uint64(h.Blocks)-1)*s.bs)
		if err := s.dev.ReadAt(payload, int64((s.sb.JournalStart+at+1)*s.bs)); err != nil {
			return nil, nil, 0, false
		}
		payload = payload[:h.PayloadLen]
		if format.Checksum(payload) != h.PayloadCRC {
			// A torn commit: the end of the log, unless the commit
			// wrapped and this is a stale torn copy of its number
			// (images written before sequence numbers were moved past
			// a torn tail at mount).
			continue
		}
		return h, payload, at, true
	}
	return nil, nil, 0, false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

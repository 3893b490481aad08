package meta

import (
	"errors"
	"fmt"
	"sort"
	"syscall"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

// ErrMetaFull means the metadata no longer fits in a checkpoint slot.
var ErrMetaFull = errors.New("metadata area full")

// encodeState serializes the whole metadata state as records. The caller
// holds opLock exclusively, so no inode changes underneath.
func (s *Store) encodeState() []byte {
	var e format.Encoder
	for ag := range s.agNext {
		e.AG(uint32(ag), s.agNext[ag].Load())
	}
	e.Rotor(s.rotor.Load())
	for _, in := range s.itab.all() {
		e.Inode(&in.attr)
		names := make([]string, 0, len(in.xattr))
		for k := range in.xattr {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			e.Xattr(in.attr.Ino, k, in.xattr[k])
		}
		for _, x := range in.ext.ext {
			e.Map(in.attr.Ino, x.LBlk, x.Len, x.PBlk, x.Flags, x.Stream)
		}
		for name, ino := range in.dir {
			e.Link(in.attr.Ino, ino, name)
		}
	}
	return e.Buf
}

// checkpointLocked writes the whole state to the inactive slot; afterwards
// the journal is empty. j.commitMu is held.
func (j *journal) checkpointLocked() error {
	s := j.s
	if s.readOnly {
		return nil
	}
	s.opLock.Lock()
	payload := s.encodeState()
	// The snapshot contains the open transaction's records: close that
	// transaction here (its records are dropped, its frees wait for this
	// checkpoint). Replaying it on top of the snapshot could fail: a record
	// for an inode that a later record of the same transaction freed finds
	// no inode.
	j.mu.Lock()
	tx, txRecs, frees := j.detachLocked()
	seq := j.openTx
	j.mu.Unlock()
	cleared := s.clearDirty()
	s.opLock.Unlock()

	bs := s.bs
	maxPayload := (s.sb.CkptBlocks - 1) * bs
	s.metaFull.Store(uint64(len(payload)) > maxPayload*9/10)
	s.ckptBytes.Store(uint64(len(payload)))
	s.j.sinceCkpt.Store(0)
	err := j.writeCheckpoint(payload, seq)
	if err != nil {
		// The old checkpoint and the journal are untouched: put back what
		// this one was to contain, so a later commit retries it.
		j.requeue(tx, txRecs, frees)
		s.redirty(cleared)
		return j.fail(err)
	}
	j.succeeded()
	j.ckptSeq++
	j.ckptSlot = 1 - j.ckptSlot
	j.used = 0
	if j.committed.Load() < seq {
		j.committed.Store(seq)
	}
	j.release(frees)
	s.stats.checkpoints.Add(1)
	return nil
}

// writeCheckpoint writes payload to the inactive slot with a header that
// sends replay to journal sequence seq at the current head.
func (j *journal) writeCheckpoint(payload []byte, seq uint64) error {
	s := j.s
	bs := s.bs
	if maxPayload := (s.sb.CkptBlocks - 1) * bs; uint64(len(payload)) > maxPayload {
		return fmt.Errorf("checkpoint of %d bytes exceeds slot of %d: %w", len(payload), maxPayload, ErrMetaFull)
	}
	slot := 1 - j.ckptSlot
	start := s.sb.CkptStart + uint64(slot)*s.sb.CkptBlocks
	if err := j.flush(); err != nil { // data the state points at comes first
		return err
	}
	if len(payload) > 0 {
		buf := make([]byte, (uint64(len(payload))+bs-1)/bs*bs)
		copy(buf, payload)
		if err := s.dev.WriteAt(buf, int64((start+1)*bs), 0); err != nil {
			return fmt.Errorf("checkpoint payload: %w", err)
		}
	}
	h := format.CkptHeader{Seq: j.ckptSeq + 1, JournalSeq: seq, JournalPos: j.head,
		PayloadLen: uint64(len(payload)), PayloadCRC: format.Checksum(payload), UUID: s.sb.UUID}
	hb := make([]byte, bs)
	copy(hb, h.Encode())
	if err := s.dev.WriteAt(hb, int64(start*bs), 0); err != nil {
		return fmt.Errorf("checkpoint header: %w", err)
	}
	return j.flush()
}

// readCheckpoint returns the newest valid checkpoint and its payload.
func (s *Store) readCheckpoint() (*format.CkptHeader, int, []byte, error) {
	bs := s.bs
	maxPayload := (s.sb.CkptBlocks - 1) * bs
	var best *format.CkptHeader
	var bestSlot int
	var bestPayload []byte
	var errs []error
	for slot := 0; slot < 2; slot++ {
		start := s.sb.CkptStart + uint64(slot)*s.sb.CkptBlocks
		hb := make([]byte, bs)
		if err := s.dev.ReadAt(hb, int64(start*bs)); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint slot %d: %w", slot, err))
			continue
		}
		h, err := format.DecodeCkptHeader(hb, s.sb.UUID, maxPayload)
		if err != nil {
			// A slot never written since mkfs is blank, not corrupt.
			if !allZero(hb[:format.CkptHeaderSize]) {
				errs = append(errs, fmt.Errorf("checkpoint slot %d: %w", slot, err))
			}
			continue
		}
		if best != nil && h.Seq <= best.Seq {
			continue
		}
		payload := make([]byte, (h.PayloadLen+bs-1)/bs*bs)
		if err := s.dev.ReadAt(payload, int64((start+1)*bs)); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint slot %d payload: %w", slot, err))
			continue
		}
		payload = payload[:h.PayloadLen]
		if format.Checksum(payload) != h.PayloadCRC {
			errs = append(errs, fmt.Errorf("checkpoint slot %d payload checksum: %w", slot, format.ErrCorrupt))
			continue
		}
		best, bestSlot, bestPayload = h, slot, payload
	}
	if best == nil {
		return nil, 0, nil, fmt.Errorf("no valid checkpoint: %w", errors.Join(errs...))
	}
	if len(errs) > 0 && s.log != nil {
		s.log.Error("a checkpoint slot is damaged; using the other one — changes after it that the journal no longer holds are lost (run streamfs fsck)",
			zapErr(errors.Join(errs...)))
	}
	return best, bestSlot, bestPayload, nil
}

// apply applies one record to the in-memory state (checkpoint load and
// journal replay). Records are idempotent "set" operations, so replaying a
// transaction that is partly contained in the checkpoint is harmless.
func (s *Store) apply(r *format.Record) error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("record type %d: "+f+": %w", append([]any{r.Type}, append(a, format.ErrCorrupt)...)...)
	}
	need := func(ino uint64) (*Inode, error) {
		in := s.itab.get(ino)
		if in == nil {
			return nil, bad("inode %d does not exist", ino)
		}
		return in, nil
	}
	switch r.Type {
	case format.RecInode:
		ag := alloc.InoAG(r.Inode.Ino)
		if r.Inode.Ino == 0 || ag >= s.sb.AGCount {
			return bad("inode number %#x", r.Inode.Ino)
		}
		in := s.itab.get(r.Inode.Ino)
		if in == nil {
			in = &Inode{}
			in.attr.Ino = r.Inode.Ino
			s.itab.put(in)
		}
		in.attr = r.Inode
		in.typ = r.Inode.Mode & syscall.S_IFMT
		if in.IsDir() && in.dir == nil {
			in.dir = make(map[string]uint64)
		}
		s.bumpAGNext(r.Inode.Ino)
	case format.RecFree:
		s.itab.del(r.Ino)
	case format.RecLink:
		p, err := need(r.Parent)
		if err != nil {
			return err
		}
		if p.dir == nil {
			return bad("entry %q in non-directory %d", r.Name, r.Parent)
		}
		p.dir[r.Name] = r.Ino
	case format.RecUnlink:
		p, err := need(r.Parent)
		if err != nil {
			return err
		}
		delete(p.dir, r.Name)
	case format.RecMap:
		in, err := need(r.Ino)
		if err != nil {
			return err
		}
		if r.PBlk < s.sb.MetaEnd() || r.PBlk+r.Len > s.sb.BackupBlock {
			return bad("extent %d+%d outside the data area", r.PBlk, r.Len)
		}
		in.ext.set(Extent{LBlk: r.LBlk, Len: r.Len, PBlk: r.PBlk, Flags: r.Flags, Stream: r.Stream})
	case format.RecPunch:
		in, err := need(r.Ino)
		if err != nil {
			return err
		}
		in.ext.punch(r.LBlk, r.Len)
	case format.RecXattr:
		in, err := need(r.Ino)
		if err != nil {
			return err
		}
		if in.xattr == nil {
			in.xattr = make(map[string][]byte)
		}
		in.xattr[r.Name] = r.Value
	case format.RecXattrDel:
		in, err := need(r.Ino)
		if err != nil {
			return err
		}
		delete(in.xattr, r.Name)
	case format.RecAG:
		if r.AG >= s.sb.AGCount {
			return bad("AG %d", r.AG)
		}
		if s.agNext[r.AG].Load() < r.Next {
			s.agNext[r.AG].Store(r.Next)
		}
	case format.RecRotor:
		s.rotor.Store(r.Next)
	default:
		return bad("unexpected")
	}
	return nil
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
	j.head, j.used, j.openTx = pos, used, seq
	j.committed.Store(seq)
	return commits, records, nil
}

// readCommit reads the commit with sequence seq at pos, or at 0 when it
// wrapped. ok is false when neither place holds a valid commit.
func (s *Store) readCommit(seq, pos uint64) (*format.JournalHeader, []byte, uint64, bool) {
	for _, at := range []uint64{pos, 0} {
		if at == 0 && pos == 0 && at != pos {
			continue
		}
		hb := make([]byte, s.bs)
		if err := s.dev.ReadAt(hb, int64((s.sb.JournalStart+at)*s.bs)); err != nil {
			continue
		}
		h, err := format.DecodeJournalHeader(hb, s.sb.UUID, uint32(s.bs), s.sb.JournalBlocks)
		if err != nil || h.Seq != seq || at+uint64(h.Blocks) > s.sb.JournalBlocks {
			if at == 0 {
				break
			}
			continue
		}
		payload := make([]byte, (uint64(h.Blocks)-1)*s.bs)
		if err := s.dev.ReadAt(payload, int64((s.sb.JournalStart+at+1)*s.bs)); err != nil {
			return nil, nil, 0, false
		}
		payload = payload[:h.PayloadLen]
		if format.Checksum(payload) != h.PayloadCRC {
			return nil, nil, 0, false // torn commit: the end of the log
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

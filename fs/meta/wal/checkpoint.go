package wal

import (
	"errors"
	"fmt"
	"slices"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// Checkpoint makes the trees durable so the journal before it can be
// reused:
//
//  1. Host.Freeze, with operations paused (for memcpy time only), takes the
//     dirty nodes and closes the open journal transaction — the checkpoint
//     contains it;
//  2. with operations going on, the nodes are encoded and written, the
//     device flushed (data and nodes before the roots that reach them),
//     the header and roots written to the inactive slot, the device
//     flushed again;
//  3. blocks the new checkpoint no longer references (old node copies,
//     data freed by the closed transaction) go back to the allocator.
//
// A failure at any step fails the log: the old checkpoint and the journal
// after it still describe everything acknowledged.
func (l *Log) Checkpoint() error {
	return l.CheckpointVia(l.host.Freeze)
}

// CheckpointVia is Checkpoint with freeze in place of Host.Freeze (tests
// write checkpoints of trees changed by hand).
func (l *Log) CheckpointVia(freeze func(closeTx func()) (Frozen, error)) error {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	return l.checkpointLocked(freeze)
}

// checkpointLocked takes a checkpoint. commitMu is held.
func (l *Log) checkpointLocked(freeze func(closeTx func()) (Frozen, error)) error {
	if l.readOnly {
		return nil
	}
	if l.failed.Load() {
		return ErrFailed
	}
	var frees []alloc.Extent
	var seq uint64
	closed := false
	f, err := freeze(func() {
		_, _, frees, _ = l.detach(true, false) // the checkpoint contains its records
		seq = l.openTx.Load()
		closed = true
	})
	if err != nil {
		if closed {
			return l.Fail(fmt.Errorf("preparing checkpoint: %w", err))
		}
		return err
	}
	if !closed {
		return l.Fail(errors.New("preparing checkpoint: the open transaction was not closed"))
	}
	// Frozen nodes are immutable: encode them while operations go on.
	var writes []tree.BlockWrite
	for _, fr := range f.Nodes {
		writes = append(writes, fr.Encode()...)
	}
	if err := l.writeCheckpoint(writes, f.Roots, seq); err != nil {
		return l.Fail(err)
	}
	var n uint64
	for _, w := range writes {
		n += uint64(len(w.Data))
	}
	l.host.Written(f, n)
	l.ckptSeq++
	l.ckptSlot = 1 - l.ckptSlot
	l.used = 0
	if l.committed.Load() < seq {
		l.committed.Store(seq)
	}
	for _, b := range f.Released {
		frees = append(frees, alloc.Extent{Start: b, Len: 1})
	}
	l.host.Release(frees)
	return nil
}

// writeCheckpoint writes the node blocks, then the header and roots to the
// inactive slot, with a header that sends replay to journal sequence seq at
// the current head.
func (l *Log) writeCheckpoint(writes []tree.BlockWrite, roots []uint64, seq uint64) error {
	bs := l.geo.BlockSize
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
		if err := l.dev.WriteAt(buf, int64(writes[i].Blk*bs), backend.StreamMeta); err != nil {
			return fmt.Errorf("checkpoint: writing tree nodes at block %d: %w", writes[i].Blk, err)
		}
		i = k
	}
	if err := l.flush(); err != nil { // data and nodes before the roots
		return err
	}
	payload := make([]byte, 0, len(roots)*8)
	for _, r := range roots {
		payload = le64(payload, r)
	}
	slot := 1 - l.ckptSlot
	start := l.geo.CkptStart + uint64(slot)*l.geo.CkptBlocks
	h := format.CkptHeader{Seq: l.ckptSeq + 1, JournalSeq: seq, JournalPos: l.head,
		PayloadLen: uint64(len(payload)), PayloadCRC: format.Checksum(payload), UUID: l.geo.UUID}
	buf := make([]byte, l.geo.CkptBlocks*bs)
	copy(buf, h.Encode())
	copy(buf[bs:], payload)
	if err := l.dev.WriteAt(buf, int64(start*bs), backend.StreamMeta); err != nil {
		return fmt.Errorf("checkpoint header: %w", err)
	}
	return l.flush()
}

func le64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

// Found is the checkpoint a mount starts from.
type Found struct {
	Header *format.CkptHeader
	Slot   int
	Roots  []uint64
	// Damage describes a slot that did not verify (nil: none).
	Damage error
	// Torn holds the headers of damaged slots whose header verified but
	// whose roots did not (what a crash during a checkpoint leaves), when
	// that is all the damage.
	Torn []*format.CkptHeader
}

// ReadCheckpoint returns the newest valid checkpoint and what was wrong
// with the other slot, if anything.
func ReadCheckpoint(dev Device, geo Geometry) (*Found, error) {
	bs := geo.BlockSize
	maxPayload := (geo.CkptBlocks - 1) * bs
	var best *Found
	var errs []error
	var torn []*format.CkptHeader
	for slot := 0; slot < 2; slot++ {
		start := geo.CkptStart + uint64(slot)*geo.CkptBlocks
		buf := make([]byte, geo.CkptBlocks*bs)
		if err := dev.ReadAt(buf, int64(start*bs)); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint slot %d: %w", slot, err))
			continue
		}
		h, err := format.DecodeCkptHeader(buf, geo.UUID, maxPayload)
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
		if h.PayloadLen != uint64(geo.Roots)*8 {
			errs = append(errs, fmt.Errorf("checkpoint slot %d holds %d bytes of roots for %d AGs: %w",
				slot, h.PayloadLen, geo.Roots, format.ErrCorrupt))
			continue
		}
		roots := make([]uint64, geo.Roots)
		bad := false
		for i := range roots {
			for k := 7; k >= 0; k-- {
				roots[i] = roots[i]<<8 | uint64(payload[i*8+k])
			}
			if roots[i] != 0 && (roots[i] < geo.DataStart || roots[i] >= geo.DataEnd) {
				bad = true
			}
		}
		if bad {
			errs = append(errs, fmt.Errorf("checkpoint slot %d: a tree root outside the data area: %w", slot, format.ErrCorrupt))
			continue
		}
		if best != nil && h.Seq <= best.Header.Seq {
			continue
		}
		best = &Found{Header: h, Slot: slot, Roots: roots}
	}
	if best == nil {
		return nil, fmt.Errorf("no valid checkpoint: %w", errors.Join(errs...))
	}
	if len(errs) > 0 {
		best.Damage = errors.Join(errs...)
		if len(torn) == len(errs) {
			best.Torn = torn
		}
	}
	return best, nil
}

// Interrupted reports whether the damage f found is what a crash during a
// checkpoint leaves, rather than damage: every damaged slot has a valid
// header and is older than the checkpoint in use, or names a journal
// position that the replay reached. Call after Replay.
func (l *Log) Interrupted(f *Found) bool {
	if f.Torn == nil {
		return false
	}
	for _, h := range f.Torn {
		// The interrupted checkpoint closed one transaction number that
		// was never journaled (replay stops at it): its records were
		// acknowledged to no one before that checkpoint was durable. Past
		// that, it held commits the journal no longer has.
		if h.Seq > f.Header.Seq && h.JournalSeq > l.openTx.Load()+1 {
			return false
		}
	}
	return true
}

// Replay applies (with apply) the journal commits that follow checkpoint h,
// each whole or not at all. A commit whose checksums verify but whose
// records do not decode fails the replay, unless badCommit is set: then it
// hears of it and the replay ends before it. Replay returns the number of
// commits and records applied and leaves the log after the last good
// commit.
func (l *Log) Replay(h *format.CkptHeader, apply func(*format.Record) error, badCommit func(error)) (commits, records int, err error) {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	seq, pos := h.JournalSeq, h.JournalPos
	if pos == l.geo.JournalBlocks {
		pos = 0 // written before commits ending at the journal's end wrapped the head
	}
	if pos >= l.geo.JournalBlocks {
		return 0, 0, fmt.Errorf("checkpoint journal position %d beyond journal: %w", pos, format.ErrCorrupt)
	}
	used := uint64(0)
	for {
		hdr, payload, at, ok := l.readCommit(seq, pos)
		if !ok {
			break
		}
		if at != pos {
			used += l.geo.JournalBlocks - pos
		}
		// Decode the whole commit before applying any of it: a commit is
		// applied entirely or not at all.
		var recs []*format.Record
		if err := format.DecodeRecords(payload, func(r *format.Record) error {
			recs = append(recs, r)
			return nil
		}); err != nil {
			err = fmt.Errorf("journal commit %d has valid checksums but malformed records: %w", seq, err)
			if badCommit == nil {
				return commits, records, fmt.Errorf("%w (streamfs fsck -y ends the journal before it)", err)
			}
			badCommit(err)
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
		if pos == l.geo.JournalBlocks {
			pos = 0
		}
		used += uint64(hdr.Blocks)
		seq++
		if used >= l.geo.JournalBlocks {
			break
		}
	}
	l.head, l.used = pos, used
	l.openTx.Store(seq)
	l.committed.Store(seq)
	return commits, records, nil
}

// readCommit reads the commit with sequence seq at pos, or at 0 when it
// wrapped. ok is false when neither place holds a valid commit.
func (l *Log) readCommit(seq, pos uint64) (*format.JournalHeader, []byte, uint64, bool) {
	bs := l.geo.BlockSize
	places := []uint64{pos, 0}
	if pos == 0 {
		places = places[:1]
	}
	for _, at := range places {
		hb := make([]byte, bs)
		if err := l.dev.ReadAt(hb, int64((l.geo.JournalStart+at)*bs)); err != nil {
			continue
		}
		h, err := format.DecodeJournalHeader(hb, l.geo.UUID, uint32(bs), l.geo.JournalBlocks)
		if err != nil || h.Seq != seq || at+uint64(h.Blocks) > l.geo.JournalBlocks {
			continue
		}
		payload := make([]byte, (uint64(h.Blocks)-1)*bs)
		if err := l.dev.ReadAt(payload, int64((l.geo.JournalStart+at+1)*bs)); err != nil {
			return nil, nil, 0, false
		}
		payload = payload[:h.PayloadLen]
		if format.Checksum(payload) != h.PayloadCRC {
			// A torn commit: the end of the log, unless the commit
			// wrapped and this is a stale torn copy of its number
			// (images written before rule 5 held).
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

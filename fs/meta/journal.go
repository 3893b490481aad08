package meta

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

// journal is the write-ahead log. Operations append their records to the
// open transaction; a commit takes the whole open transaction and writes it
// as one checksummed commit (group commit): every fsync waiting at that
// moment is served by the same device flushes.
//
// The open transaction is striped so that writers do not serialize on one
// lock: an operation takes a sequence number and appends to the stripe of
// the first inode it changes; a commit locks every stripe, detaches them and merges their
// records in sequence order. Records of one inode keep their order because
// an operation appends while it holds the inode's lock (so its number is
// taken after every earlier change to that inode); free-space changes of
// concurrent operations touch disjoint blocks and commute.
//
// A commit is: device Flush (the data the records point at is durable
// first: durability rule 1), write the commit blocks, device Flush. Blocks
// freed by a transaction go back to the allocator only after its commit is
// durable (rule 2).
type journal struct {
	s *Store

	opSeq   atomic.Uint64 // orders appended operations
	stripes [journalStripes]stripe
	openTx  atomic.Uint64 // sequence number the open transaction will commit as; changed with every stripe locked

	commitMu sync.Mutex // serializes commits and checkpoints; guards the fields below
	head     uint64     // journal block where the next commit goes
	used     uint64     // journal blocks used since the last checkpoint
	ckptSeq  uint64     // sequence of the newest durable checkpoint
	ckptSlot int        // slot (0 or 1) holding it

	committed  atomic.Uint64 // every transaction below this is durable
	flushStart atomic.Uint64 // device flushes started
	flushDone  atomic.Uint64 // value of flushStart of the last completed flush
	failed     atomic.Bool   // shut down: the journal accepts no more commits
}

const journalStripes = 16

// stripe is one part of the open transaction.
type stripe struct {
	mu   sync.Mutex // leaf
	buf  []byte
	ents []stripeEnt
	free []alloc.Extent // blocks freed by the open transaction
	_    [40]byte       // keep stripes on their own cache lines
}

type stripeEnt struct {
	seq      uint64
	off, end int
}

// append adds one operation's records (already encoded in rec) to the open
// transaction and the extents it frees. The caller holds Store.opLock
// shared and the locks of the inodes the records change.
func (j *journal) append(rec []byte, freed []alloc.Extent, hint uint64) {
	seq := j.opSeq.Add(1)
	// Writers to different inodes take different stripes (hint: the first
	// inode the operation changes); the order comes from seq alone.
	st := &j.stripes[(hint^hint>>32)%journalStripes]
	st.mu.Lock()
	off := len(st.buf)
	st.buf = append(st.buf, rec...)
	st.ents = append(st.ents, stripeEnt{seq, off, len(st.buf)})
	st.free = append(st.free, freed...)
	st.mu.Unlock()
}

// pendingFreeBlocks counts blocks freed by the open transaction.
func (j *journal) pendingFreeBlocks() uint64 {
	var n uint64
	for i := range j.stripes {
		st := &j.stripes[i]
		st.mu.Lock()
		for _, e := range st.free {
			n += e.Len
		}
		st.mu.Unlock()
	}
	return n
}

// sync makes every transaction appended so far durable, together with every
// data write that completed before the call.
func (j *journal) sync() error {
	want := j.openTx.Load()
	started := j.flushStart.Load()
	j.commitMu.Lock()
	defer j.commitMu.Unlock()
	if j.committed.Load() > want && j.flushDone.Load() > started {
		return nil // a commit that began after us covered everything
	}
	return j.commitLocked()
}

func (j *journal) flush() error {
	n := j.flushStart.Add(1)
	if err := j.s.dev.Flush(); err != nil {
		return fmt.Errorf("device flush: %w", err)
	}
	j.flushDone.Store(n)
	return nil
}

// commitLocked commits the open transaction. j.commitMu is held.
func (j *journal) commitLocked() error {
	if j.failed.Load() {
		return ErrJournalFailed
	}
	if j.s.readOnly {
		return nil
	}
	tx, payload, frees, empty := j.detach(false, true)
	if empty {
		// Nothing to log: only make completed data writes durable. The
		// open transaction keeps its sequence number, since replay stops
		// at the first gap in the sequence.
		if err := j.flush(); err != nil {
			return j.s.shutdown(err)
		}
		return nil
	}
	if j.s.needCheckpoint() {
		// Too much is dirty: a checkpoint contains this transaction.
		if err := j.checkpointLocked(); err != nil {
			return err
		}
		j.release(frees)
		return nil
	}

	bs := j.s.bs
	blocks := (uint64(len(payload))+bs-1)/bs + 1
	pos, skip := j.head, uint64(0)
	if pos+blocks > j.s.sb.JournalBlocks {
		skip = j.s.sb.JournalBlocks - pos
		pos = 0
	}
	if j.used+skip+blocks > j.s.sb.JournalBlocks {
		// No room: a checkpoint contains this transaction and empties the journal.
		if err := j.checkpointLocked(); err != nil {
			return err
		}
		j.release(frees)
		return nil
	}
	if err := j.writeCommit(tx, payload, pos, blocks); err != nil {
		// The commit may be on the media in part or whole: nothing may
		// be written under its sequence number again.
		return j.s.shutdown(err)
	}
	j.head = pos + blocks
	if j.head == j.s.sb.JournalBlocks {
		j.head = 0 // a checkpoint must never record a position past the end
	}
	j.used += skip + blocks
	j.committed.Store(tx + 1)
	j.release(frees)
	if j.used > j.s.sb.JournalBlocks/2 {
		// This commit is durable whatever happens to the checkpoint.
		_ = j.checkpointLocked()
	}
	return nil
}

// detach takes the open transaction out for committing, its records in
// operation order. An empty transaction is left open (keeping its number)
// unless always is set. Without wantPayload (a checkpoint, which contains
// the records already) only the frees are returned.
func (j *journal) detach(always, wantPayload bool) (tx uint64, payload []byte, frees []alloc.Extent, empty bool) {
	type part struct {
		buf  []byte
		ents []stripeEnt
	}
	var parts [journalStripes]part
	for i := range j.stripes {
		j.stripes[i].mu.Lock()
	}
	n := 0
	for i := range j.stripes {
		n += len(j.stripes[i].ents)
	}
	empty = n == 0
	tx = j.openTx.Load()
	if !empty || always {
		for i := range j.stripes {
			st := &j.stripes[i]
			parts[i] = part{st.buf, st.ents}
			frees = append(frees, st.free...)
			st.buf, st.ents, st.free = nil, nil, nil
		}
		j.openTx.Add(1)
	}
	for i := range j.stripes {
		j.stripes[i].mu.Unlock()
	}
	if empty || !wantPayload {
		return tx, nil, frees, empty
	}
	// Merge outside the stripe locks: appenders go on meanwhile.
	type ent struct {
		seq uint64
		b   []byte
	}
	ents := make([]ent, 0, n)
	size := 0
	for _, p := range parts {
		for _, e := range p.ents {
			ents = append(ents, ent{e.seq, p.buf[e.off:e.end]})
			size += e.end - e.off
		}
	}
	slices.SortFunc(ents, func(a, b ent) int { return cmp.Compare(a.seq, b.seq) })
	payload = make([]byte, 0, size)
	for _, e := range ents {
		payload = append(payload, e.b...)
	}
	return tx, payload, frees, empty
}

// writeCommit writes one commit at journal block pos: the data its records
// point at is flushed first (rule 1), the commit itself after.
func (j *journal) writeCommit(tx uint64, payload []byte, pos, blocks uint64) error {
	if err := j.flush(); err != nil {
		return err
	}
	bs := j.s.bs
	hdr := format.JournalHeader{Seq: tx, Blocks: uint32(blocks), PayloadLen: uint32(len(payload)),
		PayloadCRC: format.Checksum(payload), UUID: j.s.sb.UUID}
	buf := make([]byte, blocks*bs)
	copy(buf, hdr.Encode())
	copy(buf[bs:], payload)
	if err := j.s.dev.WriteAt(buf, int64((j.s.sb.JournalStart+pos)*bs), 0); err != nil {
		return fmt.Errorf("journal write at block %d: %w", pos, err)
	}
	return j.flush()
}

// ErrJournalFailed means a metadata write failed and the filesystem shut
// down: nothing more is committed until it is mounted again.
var ErrJournalFailed = errors.New("filesystem shut down after a metadata write error; unmount and mount again to recover from the log")

// release returns durably freed blocks to the allocator (and the device).
func (j *journal) release(frees []alloc.Extent) {
	for _, e := range frees {
		// Discard before the blocks can be handed out again.
		if j.s.opts.Discard {
			_ = j.s.dev.Discard(int64(e.Start*j.s.bs), int64(e.Len*j.s.bs))
		}
		if err := j.s.alloc.Free(e.Start, e.Len); err != nil {
			j.s.log.Error("freeing blocks failed: allocator and metadata disagree", zapErr(err))
		}
	}
}

// Package wal is streamfs's write-ahead log and its checkpoints: the one
// place that decides what reaches the media when. Package meta changes its
// trees in memory and appends the records of every change here; the log
// makes them durable (commit), and a checkpoint writes the changed tree
// nodes and new roots so the journal can be reused. The on-disk layout of
// the checkpoint slots and the journal is written down in package format.
//
// # Ordering rules
//
//  1. A commit is: device flush (the data its records point at is durable
//     before the records: a committed extent never points at unwritten
//     blocks), the commit blocks, device flush.
//  2. Blocks a transaction frees go back (Host.Release) only after its commit
//     or the checkpoint that contains it is durable.
//  3. A checkpoint writes the tree nodes, flushes, writes its header and roots
//     to the slot not in use, flushes: the previous checkpoint stays intact
//     until the new one is complete. Blocks the new checkpoint no longer
//     references go back only after it is durable.
//  4. After a failed write or flush nothing more is written (the log is
//     failed: ErrFailed): what failed may or may not be on the media.
//  5. A sequence number is never written for two different commits. Replay
//     stops at the first commit that does not verify; the first checkpoint
//     after a mount moves the sequence past it (Checkpoint always closes the
//     open transaction number), so a torn copy left on the media is never
//     taken for a later commit.
//
// # Locking
//
// Append takes one stripe lock (a leaf). Sync, Checkpoint and Replay
// serialize on commitMu; a checkpoint calls Host.Freeze with commitMu held,
// and Freeze pauses the host's operations (which append with the host's
// operation lock held shared) while the open transaction is closed.
package wal

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// Device is the storage the log writes to.
type Device interface {
	ReadAt(p []byte, off int64) error
	WriteAt(p []byte, off int64, stream uint32) error
	Flush() error
}

// Geometry is where the log lives, in blocks of BlockSize bytes.
type Geometry struct {
	BlockSize     uint64
	JournalStart  uint64
	JournalBlocks uint64
	CkptStart     uint64
	CkptBlocks    uint64
	// Roots is the number of tree roots a checkpoint records (the AG
	// count); a root is 0 or inside [DataStart, DataEnd).
	Roots              int
	DataStart, DataEnd uint64
	UUID               [16]byte
}

// GeometryOf returns the log's geometry on the filesystem sb describes.
func GeometryOf(sb *format.Super) Geometry {
	return Geometry{
		BlockSize: uint64(sb.BlockSize), JournalStart: sb.JournalStart, JournalBlocks: sb.JournalBlocks,
		CkptStart: sb.CkptStart, CkptBlocks: sb.CkptBlocks, Roots: int(sb.AGCount),
		DataStart: sb.MetaEnd(), DataEnd: sb.BackupBlock, UUID: sb.UUID,
	}
}

// Frozen is a checkpoint's content, taken while operations were paused.
type Frozen struct {
	Nodes []*tree.Frozen // encoded by the log once operations go on
	Roots []uint64
	// Released are node blocks the checkpoint no longer references: they
	// may be reused once it is durable.
	Released []uint64
}

// Host is the metadata the log makes durable.
type Host interface {
	// NeedCheckpoint says enough changed in memory that a commit should
	// be a checkpoint instead (memory and replay time stay bounded).
	NeedCheckpoint() bool
	// Freeze prepares a checkpoint. It pauses every operation that
	// appends to the log, calls closeTx while they are paused (the
	// checkpoint contains the open transaction), and lets them go on. It
	// must refuse (returning an error) if the log failed meanwhile.
	Freeze(closeTx func()) (Frozen, error)
	// Written says checkpoint f, of nodeBytes bytes of nodes, is durable.
	Written(f Frozen, nodeBytes uint64)
	// Release gives durably freed blocks back to the allocator.
	Release(frees []alloc.Extent)
	// Failed hears, once, of the error that failed the log.
	Failed(err error)
}

// ErrFailed means a metadata write failed and the log stopped: nothing more
// is committed until the filesystem is mounted again.
var ErrFailed = errors.New("filesystem shut down after a metadata write error; unmount and mount again to recover from the log")

// Log is the journal and the checkpoint slots of one mounted filesystem.
//
// The open transaction is striped so that writers do not serialize on one
// lock: an operation takes a sequence number and appends to the stripe of
// the first inode it changes; a commit locks every stripe, detaches them
// and merges their records in sequence order. Records of one inode keep
// their order because an operation appends while it holds the inode's lock
// (so its number is taken after every earlier change to that inode);
// free-space changes of concurrent operations touch disjoint blocks and
// commute. A commit takes the whole open transaction (group commit): every
// fsync waiting at that moment is served by the same device flushes.
type Log struct {
	dev      Device
	geo      Geometry
	host     Host
	readOnly bool // guarded by commitMu

	opSeq   atomic.Uint64 // orders appended operations
	stripes [stripes]stripe
	openTx  atomic.Uint64 // sequence number the open transaction will commit as; changed with every stripe locked

	commitMu sync.Mutex // serializes commits and checkpoints; guards the fields below
	head     uint64     // journal block where the next commit goes
	used     uint64     // journal blocks used since the last checkpoint
	ckptSeq  uint64     // sequence of the newest durable checkpoint
	ckptSlot int        // slot (0 or 1) holding it

	committed  atomic.Uint64 // every transaction below this is durable
	flushStart atomic.Uint64 // device flushes started
	flushDone  atomic.Uint64 // value of flushStart of the last completed flush
	failed     atomic.Bool   // the log accepts no more commits
}

const stripes = 16

// stripe is one part of the open transaction.
type stripe struct {
	mu   sync.Mutex // leaf
	buf  []byte
	ents []stripeEnt
	free []alloc.Extent // blocks freed by the open transaction
	// spare and spareEnts are the buffers the previous commit took out,
	// given back once merged: the open transaction refills them instead
	// of growing new ones from nothing (growing them was 3% of the
	// daemon's CPU under W1).
	spare     []byte
	spareEnts []stripeEnt
	_         [40]byte // keep stripes on their own cache lines
}

// keepBytes bounds a spare buffer a stripe keeps between commits.
const keepBytes = 1 << 20

type stripeEnt struct {
	seq      uint64
	off, end int
}

// New returns the log of a filesystem; Start or Replay positions it.
func New(dev Device, geo Geometry, host Host, readOnly bool) *Log {
	return &Log{dev: dev, geo: geo, host: host, readOnly: readOnly}
}

// Start positions the log: the newest checkpoint is ckptSeq in slot, and
// the next commit is seq at journal block head (mkfs, norecovery, fsck).
func (l *Log) Start(ckptSeq uint64, slot int, seq, head uint64) {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	l.ckptSeq, l.ckptSlot, l.head = ckptSeq, slot, head
	l.openTx.Store(seq)
	l.committed.Store(seq)
}

// SetWritable lets a log opened read-only write from now on (a remount
// read-write): it is where its replay or Start left it, and its first
// checkpoint moves the sequence past anything replay stopped at.
func (l *Log) SetWritable() {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	l.readOnly = false
}

// SkipSeq moves the open transaction's sequence number n ahead, so that
// replay never reaches commits still in the journal (fsck ending the log
// before a bad commit).
func (l *Log) SkipSeq(n uint64) { l.openTx.Add(n) }

// OpenSeq is the sequence number the open transaction will commit as.
func (l *Log) OpenSeq() uint64 { return l.openTx.Load() }

// CheckpointSeq is the sequence number of the newest durable checkpoint.
func (l *Log) CheckpointSeq() uint64 {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	return l.ckptSeq
}

// Head is the journal block the next commit goes to.
func (l *Log) Head() uint64 {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	return l.head
}

// MoveHead puts the journal head at pos: tests use it to reach a state
// (a head near the journal's end) that commit sizes reach in real use.
func (l *Log) MoveHead(pos uint64) {
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	l.head = pos % l.geo.JournalBlocks
}

// Failed reports whether the log stopped after a failed write.
func (l *Log) Failed() bool { return l.failed.Load() }

// Fail stops the log (a write failed, or a change could not be applied):
// the failed write may or may not be on the media, so nothing may be built
// on it. It returns err wrapped with ErrFailed.
func (l *Log) Fail(err error) error {
	if l.failed.CompareAndSwap(false, true) {
		l.host.Failed(err)
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// Stop stops the log on request, without an error (FS_IOC_SHUTDOWN); it
// reports whether it was running.
func (l *Log) Stop() bool { return l.failed.CompareAndSwap(false, true) }

// Append adds one operation's records (already encoded in rec) to the open
// transaction and the extents it frees. The caller holds its operation lock
// shared and the locks of the inodes the records change.
func (l *Log) Append(rec []byte, freed []alloc.Extent, hint uint64) {
	seq := l.opSeq.Add(1)
	// Writers to different inodes take different stripes (hint: the first
	// inode the operation changes); the order comes from seq alone.
	st := &l.stripes[(hint^hint>>32)%stripes]
	st.mu.Lock()
	off := len(st.buf)
	st.buf = append(st.buf, rec...)
	st.ents = append(st.ents, stripeEnt{seq, off, len(st.buf)})
	st.free = append(st.free, freed...)
	st.mu.Unlock()
}

// PendingFreeBlocks counts blocks freed by the open transaction.
func (l *Log) PendingFreeBlocks() uint64 {
	var n uint64
	for i := range l.stripes {
		st := &l.stripes[i]
		st.mu.Lock()
		for _, e := range st.free {
			n += e.Len
		}
		st.mu.Unlock()
	}
	return n
}

// Sync makes every transaction appended so far durable, together with every
// data write that completed before the call.
func (l *Log) Sync() error {
	want := l.openTx.Load()
	started := l.flushStart.Load()
	l.commitMu.Lock()
	defer l.commitMu.Unlock()
	if l.committed.Load() > want && l.flushDone.Load() > started {
		return nil // a commit that began after us covered everything
	}
	return l.commitLocked()
}

func (l *Log) flush() error {
	n := l.flushStart.Add(1)
	if err := l.dev.Flush(); err != nil {
		return fmt.Errorf("device flush: %w", err)
	}
	l.flushDone.Store(n)
	return nil
}

// commitLocked commits the open transaction. commitMu is held.
func (l *Log) commitLocked() error {
	if l.failed.Load() {
		return ErrFailed
	}
	if l.readOnly {
		return nil
	}
	tx, payload, frees, empty := l.detach(false, true)
	if empty {
		// Nothing to log: only make completed data writes durable. The
		// open transaction keeps its sequence number, since replay stops
		// at the first gap in the sequence.
		if err := l.flush(); err != nil {
			return l.Fail(err)
		}
		return nil
	}
	if l.host.NeedCheckpoint() {
		// Too much is dirty: a checkpoint contains this transaction.
		if err := l.checkpointLocked(l.host.Freeze); err != nil {
			return err
		}
		l.host.Release(frees)
		return nil
	}

	bs := l.geo.BlockSize
	blocks := (uint64(len(payload))+bs-1)/bs + 1
	pos, skip := l.head, uint64(0)
	if pos+blocks > l.geo.JournalBlocks {
		skip = l.geo.JournalBlocks - pos
		pos = 0
	}
	if l.used+skip+blocks > l.geo.JournalBlocks {
		// No room: a checkpoint contains this transaction and empties the journal.
		if err := l.checkpointLocked(l.host.Freeze); err != nil {
			return err
		}
		l.host.Release(frees)
		return nil
	}
	if err := l.writeCommit(tx, payload, pos, blocks); err != nil {
		// The commit may be on the media in part or whole: nothing may
		// be written under its sequence number again.
		return l.Fail(err)
	}
	l.head = pos + blocks
	if l.head == l.geo.JournalBlocks {
		l.head = 0 // a checkpoint must never record a position past the end
	}
	l.used += skip + blocks
	l.committed.Store(tx + 1)
	l.host.Release(frees)
	if l.used > l.geo.JournalBlocks/2 {
		// This commit is durable whatever happens to the checkpoint.
		_ = l.checkpointLocked(l.host.Freeze)
	}
	return nil
}

// detach takes the open transaction out for committing, its records in
// operation order. An empty transaction is left open (keeping its number)
// unless always is set. Without wantPayload (a checkpoint, which contains
// the records already) only the frees are returned.
func (l *Log) detach(always, wantPayload bool) (tx uint64, payload []byte, frees []alloc.Extent, empty bool) {
	type part struct {
		buf  []byte
		ents []stripeEnt
	}
	var parts [stripes]part
	for i := range l.stripes {
		l.stripes[i].mu.Lock()
	}
	n := 0
	for i := range l.stripes {
		n += len(l.stripes[i].ents)
	}
	empty = n == 0
	tx = l.openTx.Load()
	if !empty || always {
		for i := range l.stripes {
			st := &l.stripes[i]
			parts[i] = part{st.buf, st.ents}
			frees = append(frees, st.free...)
			st.buf, st.ents, st.free = st.spare, st.spareEnts, nil
			st.spare, st.spareEnts = nil, nil
		}
		l.openTx.Add(1)
	}
	for i := range l.stripes {
		l.stripes[i].mu.Unlock()
	}
	// The parts' buffers go back to their stripes once read (commitMu,
	// which the caller holds, keeps the next detach from taking them
	// before).
	defer func() {
		if empty && !always {
			return // nothing was taken out
		}
		for i := range parts {
			p, st := &parts[i], &l.stripes[i]
			st.mu.Lock()
			if cap(p.buf) <= keepBytes {
				st.spare = p.buf[:0]
			}
			if cap(p.ents)*int(unsafe.Sizeof(stripeEnt{})) <= keepBytes {
				st.spareEnts = p.ents[:0]
			}
			st.mu.Unlock()
		}
	}()
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
func (l *Log) writeCommit(tx uint64, payload []byte, pos, blocks uint64) error {
	if err := l.flush(); err != nil {
		return err
	}
	bs := l.geo.BlockSize
	hdr := format.JournalHeader{Seq: tx, Blocks: uint32(blocks), PayloadLen: uint32(len(payload)),
		PayloadCRC: format.Checksum(payload), UUID: l.geo.UUID}
	buf := make([]byte, blocks*bs)
	copy(buf, hdr.Encode())
	copy(buf[bs:], payload)
	if err := l.dev.WriteAt(buf, int64((l.geo.JournalStart+pos)*bs), backend.StreamMeta); err != nil {
		return fmt.Errorf("journal write at block %d: %w", pos, err)
	}
	return l.flush()
}

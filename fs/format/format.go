// Package format is the streamfs on-disk format, written down in one place.
// Every structure read from the device is decoded here and validated (magic,
// version, checksum, bounds) before anything else sees it.
//
// # Layout
//
// All integers are little-endian. The device is an array of filesystem
// blocks of BlockSize bytes (4096 by default). Block numbers are absolute.
//
//	block 0                 primary superblock (first 512 bytes of the block)
//	blocks 1..15            reserved, zero (the first 64 KiB hold only the superblock)
//	CkptStart               checkpoint slot A (CkptBlocks blocks)
//	CkptStart+CkptBlocks    checkpoint slot B (CkptBlocks blocks)
//	JournalStart            journal, a circular log of JournalBlocks blocks
//	...                     data blocks, handed out by the allocator
//	BackupBlock             backup superblock: the last block of the device
//
// The device is divided into AGCount allocation groups of AGBlocks blocks
// (the last one may be shorter). The superblock, metadata area and backup
// superblock lie inside AGs 0 and AGCount-1 and are simply never free.
//
// # Superblock (SuperSize = 512 bytes, see Super)
//
//	off size field
//	  0    8 magic "STRMFS\x00\x01"
//	  8    4 version (Version; a newer one is refused: ErrNewerFormat)
//	 12    4 compat features (unknown bits: ignored)
//	 16    4 ro-compat features (unknown bits: mount read-only only)
//	 20    4 incompat features (unknown bits: refuse to mount)
//	 24    4 block size
//	 28    4 AG count
//	 32    8 total blocks
//	 40    8 AG blocks
//	 48    8 checkpoint start block
//	 56    8 checkpoint slot blocks
//	 64    8 journal start block
//	 72    8 journal blocks
//	 80    8 backup superblock block
//	 88   16 uuid
//	104    8 creation time (unix ns)
//	112   32 label (NUL padded)
//	144    8 zoned: first block of the sequential zones (DataStart)
//	152    8 zoned: zone size in blocks (ZoneBlocks)
//	160    8 zoned: writable blocks of a sequential zone (ZoneCap)
//	168    8 zoned: sequential zones (DataZones)
//	176  332 zero
//	508    4 crc32c (Castagnoli) of bytes 0..507
//
// The zoned fields are zero unless IncompatZoned is set. Version 3 added
// them; a version 2 superblock (no zoned fields, all zero there) is read
// as it is.
//
// # Zoned layout (IncompatZoned)
//
// On a zoned device (conventional zones first, then sequential zones) the
// layout above covers only the conventional zones: TotalBlocks is their
// size, the AGs divide them, the backup superblock is their last block, and
// every metadata block (checkpoints, journal, tree nodes) lives there. File
// data lives only in the sequential zones, DataZones zones of ZoneBlocks
// blocks from DataStart, each written from its start up to ZoneCap blocks
// and never rewritten before a reset. Their free space is not recorded in
// the trees: a zone's live blocks are the extents that map it, counted at
// mount, and everything else below its write pointer is garbage for
// reclaim.
//
// # Checkpoint slot
//
// Block 0 of a slot is the header (CkptHeaderSize bytes used); the payload
// starts at block 1. Two slots alternate; the valid one (header and payload
// checksums match) with the highest Seq wins.
//
//	off size field
//	  0    8 magic "STRMCKPT"
//	  8    8 checkpoint sequence number
//	 16    8 journal sequence: the first commit not contained in this checkpoint
//	 24    8 journal position (block offset inside the journal) of that commit
//	 32    8 payload length in bytes
//	 40    4 payload crc32c
//	 44    16 filesystem uuid (a checkpoint of another filesystem is foreign)
//	 60    4 crc32c of bytes 0..59
//
// The payload is the root block of every AG's metadata tree: AGCount
// little-endian u64s (0: empty tree). The trees themselves (keys.go, the node
// format in package meta/tree) are written to fresh blocks before the header
// that points at them.
//
// # Journal
//
// A commit is a header block followed by payload blocks, written at the
// journal head. A commit that does not fit before the end of the journal is
// written at journal position 0 instead; replay that fails to find the
// expected sequence at the current position tries position 0.
//
//	off size field
//	  0    8 magic "STRMJRNL"
//	  8    8 commit sequence number (consecutive)
//	 16    4 blocks in this commit, header included
//	 20    4 payload length in bytes
//	 24    4 payload crc32c
//	 28    16 filesystem uuid
//	 44    4 crc32c of bytes 0..43
//
// Replay stops at the first commit whose header or payload does not verify
// at either place: that is a torn or never-written commit, and everything
// after it is lost by design (it was never acknowledged by fsync). A
// sequence number is never written twice: a read-write mount first writes
// a checkpoint whose journal sequence is past the one replay stopped at, so
// a torn copy left on the media can never be mistaken for a later commit.
package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Magic numbers.
var (
	SuperMagic   = [8]byte{'S', 'T', 'R', 'M', 'F', 'S', 0, 1}
	CkptMagic    = [8]byte{'S', 'T', 'R', 'M', 'C', 'K', 'P', 'T'}
	JournalMagic = [8]byte{'S', 'T', 'R', 'M', 'J', 'R', 'N', 'L'}
)

const (
	Version = 3
	// MinVersion is the oldest format this build reads: version 3 only
	// added fields a version 2 superblock holds as zero.
	MinVersion = 2
	SuperSize  = 512
	// ReservedBytes at the start hold only the primary superblock.
	ReservedBytes = 64 << 10
	// MinAGBytes is the smallest allocation group mkfs makes.
	MinAGBytes     = 16 << 20
	CkptHeaderSize = 64
	JournalHdrSize = 48
	// MaxAGCount bounds the AG count (inode numbers keep the AG in 32 bits,
	// and per-AG state is kept in memory).
	MaxAGCount = 4096
	// MinBlockSize: a tree node must hold several 255-byte names.
	MinBlockSize = 4096
)

// Feature bits; the masks say which bits this version understands.
const (
	CompatSupported   = 0
	ROCompatSupported = 0
	// IncompatZoned: file data lives in sequential zones (see "Zoned
	// layout"); a build that does not know it would write data in place.
	IncompatZoned     = 1 << 0
	IncompatSupported = IncompatZoned
)

// ErrCorrupt is wrapped by every validation failure.
var ErrCorrupt = errors.New("corrupt metadata")

// ErrNotStreamfs means the magic is not ours (a foreign or blank device).
var ErrNotStreamfs = errors.New("not a streamfs filesystem")

// ErrOldFormat means an image of an earlier on-disk format version.
var ErrOldFormat = errors.New("filesystem uses an old on-disk format")

// ErrNewerFormat means incompat feature bits or a version this build does not know.
var ErrNewerFormat = errors.New("filesystem uses a newer on-disk format")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is crc32c.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Super is the superblock.
type Super struct {
	Version       uint32
	Compat        uint32
	ROCompat      uint32
	Incompat      uint32
	BlockSize     uint32
	AGCount       uint32
	TotalBlocks   uint64
	AGBlocks      uint64
	CkptStart     uint64
	CkptBlocks    uint64
	JournalStart  uint64
	JournalBlocks uint64
	BackupBlock   uint64
	UUID          [16]byte
	CTime         int64
	Label         [32]byte
	// Zoned layout (IncompatZoned), zero otherwise.
	DataStart  uint64
	ZoneBlocks uint64
	ZoneCap    uint64
	DataZones  uint64
}

// Encode returns the SuperSize-byte image with its checksum.
func (s *Super) Encode() []byte {
	b := make([]byte, SuperSize)
	copy(b[0:8], SuperMagic[:])
	le := binary.LittleEndian
	le.PutUint32(b[8:], s.Version)
	le.PutUint32(b[12:], s.Compat)
	le.PutUint32(b[16:], s.ROCompat)
	le.PutUint32(b[20:], s.Incompat)
	le.PutUint32(b[24:], s.BlockSize)
	le.PutUint32(b[28:], s.AGCount)
	le.PutUint64(b[32:], s.TotalBlocks)
	le.PutUint64(b[40:], s.AGBlocks)
	le.PutUint64(b[48:], s.CkptStart)
	le.PutUint64(b[56:], s.CkptBlocks)
	le.PutUint64(b[64:], s.JournalStart)
	le.PutUint64(b[72:], s.JournalBlocks)
	le.PutUint64(b[80:], s.BackupBlock)
	copy(b[88:104], s.UUID[:])
	le.PutUint64(b[104:], uint64(s.CTime))
	copy(b[112:144], s.Label[:])
	le.PutUint64(b[144:], s.DataStart)
	le.PutUint64(b[152:], s.ZoneBlocks)
	le.PutUint64(b[160:], s.ZoneCap)
	le.PutUint64(b[168:], s.DataZones)
	le.PutUint32(b[508:], Checksum(b[:508]))
	return b
}

// DecodeSuper validates and decodes a superblock image. It returns
// ErrNotStreamfs for a foreign magic, ErrNewerFormat for unknown incompat
// features, and ErrCorrupt for checksum or geometry errors.
func DecodeSuper(b []byte) (*Super, error) {
	if len(b) < SuperSize {
		return nil, fmt.Errorf("superblock: %d bytes, want %d: %w", len(b), SuperSize, ErrCorrupt)
	}
	if !bytes.Equal(b[0:8], SuperMagic[:]) {
		return nil, ErrNotStreamfs
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[508:]), Checksum(b[:508]); got != want {
		return nil, fmt.Errorf("superblock checksum %08x, computed %08x: %w", got, want, ErrCorrupt)
	}
	s := &Super{
		Version:       le.Uint32(b[8:]),
		Compat:        le.Uint32(b[12:]),
		ROCompat:      le.Uint32(b[16:]),
		Incompat:      le.Uint32(b[20:]),
		BlockSize:     le.Uint32(b[24:]),
		AGCount:       le.Uint32(b[28:]),
		TotalBlocks:   le.Uint64(b[32:]),
		AGBlocks:      le.Uint64(b[40:]),
		CkptStart:     le.Uint64(b[48:]),
		CkptBlocks:    le.Uint64(b[56:]),
		JournalStart:  le.Uint64(b[64:]),
		JournalBlocks: le.Uint64(b[72:]),
		BackupBlock:   le.Uint64(b[80:]),
		CTime:         int64(le.Uint64(b[104:])),
		DataStart:     le.Uint64(b[144:]),
		ZoneBlocks:    le.Uint64(b[152:]),
		ZoneCap:       le.Uint64(b[160:]),
		DataZones:     le.Uint64(b[168:]),
	}
	copy(s.UUID[:], b[88:104])
	copy(s.Label[:], b[112:144])
	if s.Version != 0 && s.Version < MinVersion {
		return nil, fmt.Errorf("on-disk format version %d is no longer supported (this build reads version %d; re-create it with streamfs mkfs): %w",
			s.Version, Version, ErrOldFormat)
	}
	if s.Version > Version || s.Incompat&^IncompatSupported != 0 {
		return nil, fmt.Errorf("version %d, incompat features %#x (this build knows version %d, features %#x): %w",
			s.Version, s.Incompat, Version, IncompatSupported, ErrNewerFormat)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// ReadOnlyOnly reports ro-compat features this build does not know: such a
// filesystem may be mounted read-only only.
func (s *Super) ReadOnlyOnly() bool { return s.ROCompat&^ROCompatSupported != 0 }

// Validate checks the geometry for internal consistency.
func (s *Super) Validate() error {
	bad := func(f string, a ...any) error {
		return fmt.Errorf("superblock: "+f+": %w", append(a, ErrCorrupt)...)
	}
	if s.Version == 0 {
		return bad("version 0")
	}
	if s.BlockSize < MinBlockSize || s.BlockSize > 65536 || s.BlockSize&(s.BlockSize-1) != 0 {
		return bad("block size %d", s.BlockSize)
	}
	if s.AGCount == 0 || s.AGCount > MaxAGCount {
		return bad("AG count %d", s.AGCount)
	}
	// Bounding every count by the device keeps the arithmetic below (and
	// byte offsets, int64 everywhere) from overflowing.
	if s.TotalBlocks == 0 || s.TotalBlocks > 1<<48 || s.TotalBlocks > (1<<62)/uint64(s.BlockSize) {
		return bad("total blocks %d", s.TotalBlocks)
	}
	if s.AGBlocks > s.TotalBlocks || s.CkptStart > s.TotalBlocks || s.CkptBlocks > s.TotalBlocks || s.JournalBlocks > s.TotalBlocks {
		return bad("metadata area beyond the device")
	}
	if s.AGBlocks == 0 || (uint64(s.AGCount)-1)*s.AGBlocks >= s.TotalBlocks || uint64(s.AGCount)*s.AGBlocks < s.TotalBlocks {
		return bad("AG geometry %d x %d blocks for %d blocks", s.AGCount, s.AGBlocks, s.TotalBlocks)
	}
	reserved := uint64(ReservedBytes) / uint64(s.BlockSize)
	if reserved == 0 {
		reserved = 1
	}
	if s.CkptStart < reserved || s.CkptBlocks < 2 || s.JournalBlocks < 4 {
		return bad("metadata area")
	}
	if s.JournalStart != s.CkptStart+2*s.CkptBlocks {
		return bad("journal start %d", s.JournalStart)
	}
	end := s.JournalStart + s.JournalBlocks
	if end < s.JournalStart || end >= s.BackupBlock {
		return bad("journal end %d beyond backup %d", end, s.BackupBlock)
	}
	if s.BackupBlock != s.TotalBlocks-1 {
		return bad("backup superblock at %d, device has %d blocks", s.BackupBlock, s.TotalBlocks)
	}
	if !s.Zoned() {
		if s.DataStart|s.ZoneBlocks|s.ZoneCap|s.DataZones != 0 {
			return bad("zone geometry on a filesystem without the zoned feature")
		}
		return nil
	}
	if s.ZoneBlocks == 0 || s.ZoneBlocks > 1<<32 || s.ZoneCap == 0 || s.ZoneCap > s.ZoneBlocks {
		return bad("zone size %d blocks, capacity %d", s.ZoneBlocks, s.ZoneCap)
	}
	if s.DataStart < s.TotalBlocks || s.DataStart%s.ZoneBlocks != 0 || s.DataStart > 1<<48 {
		return bad("sequential zones start at block %d, conventional space ends at %d", s.DataStart, s.TotalBlocks)
	}
	if s.DataZones == 0 || s.DataZones > (1<<48)/s.ZoneBlocks || s.DataStart+s.DataZones*s.ZoneBlocks > 1<<48 {
		return bad("%d sequential zones", s.DataZones)
	}
	return nil
}

// Zoned reports the zoned layout.
func (s *Super) Zoned() bool { return s.Incompat&IncompatZoned != 0 }

// DataEnd is the block after the last one file data may use.
func (s *Super) DataEnd() uint64 {
	if s.Zoned() {
		return s.DataStart + s.DataZones*s.ZoneBlocks
	}
	return s.BackupBlock
}

// InDataArea reports whether file data may lie in blocks [start, start+n):
// between the metadata area and the backup superblock, or, on the zoned
// layout, inside the sequential zones' capacity (an extent spans zones only
// where they have no gap: capacity equal to the zone size).
func (s *Super) InDataArea(start, n uint64) bool {
	end := start + n
	if n == 0 || end < start {
		return false
	}
	if !s.Zoned() {
		return start >= s.MetaEnd() && end <= s.BackupBlock
	}
	if start < s.DataStart || end > s.DataEnd() {
		return false
	}
	z0, z1 := (start-s.DataStart)/s.ZoneBlocks, (end-1-s.DataStart)/s.ZoneBlocks
	if z0 != z1 {
		return s.ZoneCap == s.ZoneBlocks
	}
	return end <= s.DataStart+z0*s.ZoneBlocks+s.ZoneCap
}

// InMetaArea reports whether blocks [start, start+n) lie where the
// allocator hands out blocks and the free-space records describe: between
// the metadata area and the backup superblock (on the zoned layout, the
// conventional zones: tree nodes only).
func (s *Super) InMetaArea(start, n uint64) bool {
	end := start + n
	return n != 0 && end > start && start >= s.MetaEnd() && end <= s.BackupBlock
}

// MetaEnd is the first block after the metadata area.
func (s *Super) MetaEnd() uint64 { return s.JournalStart + s.JournalBlocks }

// LabelString returns the label without padding.
func (s *Super) LabelString() string {
	return string(bytes.TrimRight(s.Label[:], "\x00"))
}

// CkptHeader is the header of a checkpoint slot.
type CkptHeader struct {
	Seq        uint64
	JournalSeq uint64
	JournalPos uint64
	PayloadLen uint64
	PayloadCRC uint32
	UUID       [16]byte
}

// Encode returns the CkptHeaderSize-byte image.
func (h *CkptHeader) Encode() []byte {
	b := make([]byte, CkptHeaderSize)
	le := binary.LittleEndian
	copy(b[0:8], CkptMagic[:])
	le.PutUint64(b[8:], h.Seq)
	le.PutUint64(b[16:], h.JournalSeq)
	le.PutUint64(b[24:], h.JournalPos)
	le.PutUint64(b[32:], h.PayloadLen)
	le.PutUint32(b[40:], h.PayloadCRC)
	copy(b[44:60], h.UUID[:])
	le.PutUint32(b[60:], Checksum(b[:60]))
	return b
}

// DecodeCkptHeader validates a checkpoint header. maxPayload bounds the
// payload length (the slot size minus the header block).
func DecodeCkptHeader(b []byte, uuid [16]byte, maxPayload uint64) (*CkptHeader, error) {
	if len(b) < CkptHeaderSize {
		return nil, fmt.Errorf("checkpoint header short: %w", ErrCorrupt)
	}
	if !bytes.Equal(b[0:8], CkptMagic[:]) {
		return nil, fmt.Errorf("checkpoint magic: %w", ErrCorrupt)
	}
	le := binary.LittleEndian
	if le.Uint32(b[60:]) != Checksum(b[:60]) {
		return nil, fmt.Errorf("checkpoint header checksum: %w", ErrCorrupt)
	}
	h := &CkptHeader{
		Seq:        le.Uint64(b[8:]),
		JournalSeq: le.Uint64(b[16:]),
		JournalPos: le.Uint64(b[24:]),
		PayloadLen: le.Uint64(b[32:]),
		PayloadCRC: le.Uint32(b[40:]),
	}
	copy(h.UUID[:], b[44:60])
	if h.UUID != uuid {
		return nil, fmt.Errorf("checkpoint belongs to another filesystem: %w", ErrCorrupt)
	}
	if h.PayloadLen > maxPayload {
		return nil, fmt.Errorf("checkpoint payload %d bytes exceeds slot (%d): %w", h.PayloadLen, maxPayload, ErrCorrupt)
	}
	return h, nil
}

// JournalHeader heads one journal commit.
type JournalHeader struct {
	Seq        uint64
	Blocks     uint32
	PayloadLen uint32
	PayloadCRC uint32
	UUID       [16]byte
}

// Encode returns the JournalHdrSize-byte image.
func (h *JournalHeader) Encode() []byte {
	b := make([]byte, JournalHdrSize)
	le := binary.LittleEndian
	copy(b[0:8], JournalMagic[:])
	le.PutUint64(b[8:], h.Seq)
	le.PutUint32(b[16:], h.Blocks)
	le.PutUint32(b[20:], h.PayloadLen)
	le.PutUint32(b[24:], h.PayloadCRC)
	copy(b[28:44], h.UUID[:])
	le.PutUint32(b[44:], Checksum(b[:44]))
	return b
}

// DecodeJournalHeader validates a commit header against the filesystem
// uuid and the journal size in blocks.
func DecodeJournalHeader(b []byte, uuid [16]byte, blockSize uint32, journalBlocks uint64) (*JournalHeader, error) {
	if len(b) < JournalHdrSize {
		return nil, fmt.Errorf("journal header short: %w", ErrCorrupt)
	}
	if !bytes.Equal(b[0:8], JournalMagic[:]) {
		return nil, fmt.Errorf("journal magic: %w", ErrCorrupt)
	}
	le := binary.LittleEndian
	if le.Uint32(b[44:]) != Checksum(b[:44]) {
		return nil, fmt.Errorf("journal header checksum: %w", ErrCorrupt)
	}
	h := &JournalHeader{
		Seq:        le.Uint64(b[8:]),
		Blocks:     le.Uint32(b[16:]),
		PayloadLen: le.Uint32(b[20:]),
		PayloadCRC: le.Uint32(b[24:]),
	}
	copy(h.UUID[:], b[28:44])
	if h.UUID != uuid {
		return nil, fmt.Errorf("journal commit of another filesystem: %w", ErrCorrupt)
	}
	if h.Blocks < 1 || uint64(h.Blocks) > journalBlocks {
		return nil, fmt.Errorf("journal commit of %d blocks: %w", h.Blocks, ErrCorrupt)
	}
	need := (uint64(h.PayloadLen)+uint64(blockSize)-1)/uint64(blockSize) + 1
	if need != uint64(h.Blocks) {
		return nil, fmt.Errorf("journal commit payload %d bytes in %d blocks: %w", h.PayloadLen, h.Blocks, ErrCorrupt)
	}
	return h, nil
}

package fsck

import (
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/tree"
)

// Host is the filesystem fsck checks (package meta implements it): it
// reads and writes the superblocks and loads an image for checking.
type Host interface {
	// ReadSuper reads the primary superblock, or the backup when the
	// primary is bad; its errors explain an unusable device.
	ReadSuper(dev backend.Device) (*format.Super, error)
	// WriteSuper writes both superblock copies and flushes.
	WriteSuper(dev backend.Device, sb *format.Super) error
	// Open makes an image of the filesystem sb describes, nothing loaded
	// yet; l hears of the damage a mount would fail on. Without repair
	// the image never writes.
	Open(dev backend.Device, sb *format.Super, repair bool, log *zap.Logger, l Loader) Image
}

// Loader is what an image tells fsck while it loads. Having a Loader also
// makes the image's allocator lenient: free-space records that are
// malformed, out of order or outside their AG's data area are skipped (their
// blocks count as used) instead of failing the load; fsck reports them and
// -y rebuilds the records.
type Loader interface {
	// BadCommit hears of a checksum-valid journal commit whose records do
	// not decode; replay then ends before it instead of failing.
	BadCommit(err error)
	// BadAGHeader hears of a missing or malformed AG header; the AG's
	// counters then start from zero and fsck recounts them.
	BadAGHeader(ag int, err error)
	// BeforeReplay runs once the trees and the allocator are open, before
	// the journal is replayed (replay allocates tree nodes).
	BeforeReplay()
}

// Image is one filesystem loaded for checking, with one interface per
// capability fsck uses.
type Image interface {
	Loading
	Trees
	Space
	Counters
	Repairs
	Zones
}

// Loading reads the image into memory and writes the repaired result.
type Loading interface {
	// Load reads the newest checkpoint and replays the journal after it,
	// as a mount does. It returns the checkpoint and the commits replayed.
	Load() (*format.CkptHeader, int, error)
	// LoadDamaged opens the newest checkpoint's trees without reading
	// their roots and builds the allocator from what is readable (a
	// damaged node's blocks count as used); the AG counters and the
	// journal are left to LoadAGs and SkipJournal.
	LoadDamaged() (*format.CkptHeader, error)
	// LoadAGs reads every AG header and stream count.
	LoadAGs() error
	// SkipJournal reads the commits after checkpoint h without applying
	// them, and returns how many there are.
	SkipJournal(h *format.CkptHeader) (int, error)
	// SlotDamage is the damage Load found in a checkpoint slot (nil: none)
	// and whether it is a checkpoint interrupted while the journal still
	// holds all it contained (benign).
	SlotDamage() (interrupted bool, damage error)
	// FlushInodes puts the inode attributes replay left in memory into the
	// trees, as a checkpoint would; it returns the failures.
	FlushInodes() []error
	// FoldNodeSpace accounts for the tree nodes moved in memory in the
	// free-space records, as a checkpoint would.
	FoldNodeSpace() error
	// SkipSeq moves the journal's sequence numbers n further, beyond
	// commits that must never be replayed.
	SkipSeq(n uint64)
	// Checkpoint writes the trees and counters as a new checkpoint.
	Checkpoint() error
	// Close releases the image's caches and allocator.
	Close()
}

// Trees gives the per-AG metadata trees.
type Trees interface {
	Super() *format.Super
	// Trees returns the AG trees, one per AG, in AG order.
	Trees() []*tree.Tree
	// ReplaceTree gives AG ag a new tree holding keys and vals (in key
	// order), its nodes placed by the allocator.
	ReplaceTree(ag int, keys, vals [][]byte) error
}

// Space is the allocator tree nodes are placed by.
type Space interface {
	// Withhold marks the free blocks of [start, start+n) used, so that no
	// tree node goes there; blocks outside the data area are ignored.
	Withhold(start, n uint64)
}

// Zones is the device's zone state, for the zoned layout's checks.
type Zones interface {
	// ZoneReport describes every zone of the device, write pointers
	// included; ok is false when the device has no zones.
	ZoneReport() (zones []backend.Zone, ok bool, err error)
}

// StreamKey is a stream id and where an inode's stream came from
// (format.StreamSrc*).
type StreamKey struct {
	ID  uint32
	Src uint8
}

// Counters are the in-memory AG header counters a checkpoint writes.
type Counters interface {
	// AGCounters returns AG ag's inode count and inodes per stream.
	AGCounters(ag int) (inodes int64, streams map[StreamKey]int64)
	SetAGInodes(ag int, n int64)
	// SetAGStreams replaces AG ag's stream counts; a zero deletes one.
	SetAGStreams(ag int, streams map[StreamKey]int64)
	// NextAgino is the number the next inode of AG ag gets.
	NextAgino(ag int) uint32
	SetNextAgino(ag int, agino uint32)
	// Rotor is the AG of the next new directory.
	Rotor() uint32
}

// Repairs change the namespace.
type Repairs interface {
	// Edit starts a set of records applied to the trees as replay applies
	// them; the repaired checkpoint makes them durable.
	Edit() Edit
	// NewGen returns a new inode's generation.
	NewGen() uint32
}

// Edit applies namespace records to the trees. After a record fails to
// apply, the rest are dropped and Done reports the failure.
type Edit interface {
	Inode(a *format.InodeRec)
	Link(dir, ino uint64, mode uint32, name string)
	Unlink(dir uint64, name string)
	// Done says whether any record was added, and the first failure.
	Done() (changed bool, err error)
}

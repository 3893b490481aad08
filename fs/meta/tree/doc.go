// Package tree is a copy-on-write B+tree stored in device blocks, one tree per
// allocation group, used for streamfs metadata (extent maps, free space, ...).
//
// # Node format (the one place it is written down)
//
// A node is exactly one filesystem block (Config.NodeSize bytes, a power of
// two in 4096..65536). All integers are little-endian.
//
//	off size field
//	  0    4 magic 0x52544653 ("SFTR" in byte order)
//	  4    1 version (1)
//	  5    1 level: 0 = leaf, n = internal node whose children have level n-1
//	  6    2 count: entries in a leaf, children in an internal node
//	  8    4 used: bytes of header plus entries (64..NodeSize)
//	 12    4 crc32c (Castagnoli) of the whole block with these 4 bytes zero
//	 16    8 owner (Config.Owner, e.g. AG number + 1)
//	 24    8 self: the block number this node was written to
//	 32   16 filesystem uuid
//	 48   16 reserved, written as zero
//	 64      entries, packed, no gaps; bytes from used to NodeSize are written
//	         as zero (covered by the checksum, not interpreted)
//
// Leaf entry:     u16 klen, u16 vlen, key, value.
// Internal entry: u64 child block, u16 klen, key. The first entry's key is
// empty (klen 0); entry i > 0 holds separator key i-1. Every key in child i
// is >= separator i-1 and < separator i (byte-wise order, bytes.Compare).
//
// Keys within a node are strictly increasing. A key plus its value is at most
// MaxEntry(NodeSize) bytes, which keeps at least four entries in every node
// and lets a split always produce two halves that fit.
//
// Every node read from the device is validated (magic, version, checksum,
// owner, uuid, self block, level, entry bounds, key order) before use; a
// failure wraps ErrCorrupt.
//
// # Copy-on-write
//
// A node is identified by its block. A node that is on the device as of the
// last Snapshot ("clean") is never changed: its first modification allocates
// a new block (Pager.Alloc), frees the old one (Pager.Free) and points the
// parent, made dirty first the same way, at the copy. Dirty nodes live in a
// per-tree map and are changed in place until the next Snapshot encodes them.
// Clean nodes are read on demand and kept in the shared, byte-bounded Cache.
// Within one Put or Delete, allocation happens before any node changes, so an
// Alloc failure leaves the tree exactly as that call found it. A sequence of
// calls (Update) has no rollback: a failure in its middle keeps the calls
// before it. Callers that need a sequence all-or-nothing reserve its blocks
// first (Tx.Reserve, or a count of free blocks they guarantee, as package
// meta's space reservations do).
//
// # Checkpoints
//
// Snapshot encodes the dirty nodes and returns them with the new root; the
// caller writes them, makes them durable, records the root, then calls
// Written. A block reported through Pager.Free before Snapshot N is not
// referenced by checkpoint N and may be reused once checkpoint N is durable;
// one freed after Snapshot N (operations may continue while its writes are
// in flight) may still be referenced by it and waits for checkpoint N+1.
// Blocks of the last durable checkpoint are never written by a later
// Snapshot, so a crash at any point leaves that checkpoint intact.
//
// # Locking
//
// Each tree has one RWMutex, a leaf lock for callers: while holding it the
// tree calls only Pager and Cache methods, and Pager methods must not call
// the tree. Readers (Get, Seek, SeekLE, Ascend, Check, Blocks) share it and
// may load and cache the same clean node concurrently; writers (Put, Delete,
// Update, Snapshot, Written) hold it exclusively. The Cache is safe for
// concurrent use by all trees of a mount.
package tree

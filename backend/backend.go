// Package backend is the device layer: every byte streamfs stores goes through
// a Device. Implementations: an image file (file.go), a block device
// (block.go); NVMe FDP and ZNS passthrough live in backend/nvme, the FDP
// drive model in backend/ftl, the emulated zoned device in backend/zoned,
// a zoned device joined with a metadata device in backend/split.
// Zoned devices (zone.go) add zone reports, zone actions and append. The write call
// carries the stream so that hardware placement can honour it.
package backend

import "errors"

// Device is one storage device owned whole by a streamfs instance.
//
// Offsets and lengths are in bytes. ReadAt and WriteAt may be called
// concurrently from many goroutines. Data written with WriteAt is durable only
// after a later Flush has returned nil.
type Device interface {
	// ReadAt reads len(p) bytes at off. Short reads are errors.
	ReadAt(p []byte, off int64) error
	// WriteAt writes p at off. stream is the write stream (0 = none); a
	// device without hardware streams ignores it.
	WriteAt(p []byte, off int64, stream uint32) error
	// Flush makes every completed write durable (fdatasync / NVMe Flush).
	Flush() error
	// Discard tells the device the range holds no data (BLKDISCARD, punch
	// hole, NVMe Dataset Management). Reads of it afterwards may return
	// anything; callers never read discarded blocks.
	Discard(off, length int64) error
	// Size is the usable size in bytes.
	Size() int64
	// SectorSize is the smallest aligned I/O unit (512 or 4096).
	SectorSize() int
	// MaxStreams is the number of hardware write streams (0 = none).
	MaxStreams() uint32
	// Kind names the implementation: "file", "block", "nvme", "ftl",
	// "zoned" or "zns"; a split device names both ("file+zns").
	Kind() string
	// Close releases the device and its exclusive lock.
	Close() error
}

// StreamMeta is the stream of the filesystem's own metadata writes
// (superblock, journal, tree nodes), which live and die unlike any file's
// data. A device that can place it on a handle of its own does; every other
// treats it as no stream.
const StreamMeta = ^uint32(0)

// ErrBusy means another process holds the device (already mounted).
var ErrBusy = errors.New("device is in use by another process (already mounted?)")

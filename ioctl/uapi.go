package ioctl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Write-stream operations for WriteStream.OpFlags. A request carries exactly
// one of them; any other value (zero, a combination, an unknown bit) is a
// malformed request.
const (
	// OpGetMax asks for the number of streams N; valid ids are then 0..N,
	// where 0 means "no stream".
	OpGetMax uint32 = 1 << 0
	// OpGet asks for the file's current stream id.
	OpGet uint32 = 1 << 1
	// OpSet assigns WriteStream.StreamID to the file.
	OpSet uint32 = 1 << 2
)

// Struct sizes as the kernel's sizeof sees them; they are part of the
// command numbers, so they are fixed here rather than taken from Go's
// unsafe.Sizeof.
const (
	// WriteStreamSize is sizeof(struct fs_write_stream).
	WriteStreamSize = 16
	// FstrimRangeSize is sizeof(struct fstrim_range).
	FstrimRangeSize = 24
	// fsverityReadMetadataArgSize is sizeof(struct
	// fsverity_read_metadata_arg): five __u64 fields.
	fsverityReadMetadataArgSize = 40
)

// iowrDir is _IOWR's direction field as a constant expression, so the
// command numbers below are constants usable in switch cases; the tests
// check each of them against IOWR.
const iowrDir = (IOCRead | IOCWrite) << iocDirShift

// Command numbers.
const (
	// FS_IOC_WRITE_STREAM is _IOWR('f', 135, struct fs_write_stream).
	FS_IOC_WRITE_STREAM uint32 = iowrDir | WriteStreamSize<<iocSizeShift | 'f'<<iocTypeShift | 135
	// FS_IOC_READ_VERITY_METADATA is _IOWR('f', 135, struct
	// fsverity_read_metadata_arg). It shares type and number with
	// FS_IOC_WRITE_STREAM and differs only in size, so a handler must match
	// the whole command, never just the number; streamfs has no fs-verity
	// and answers it with ENOTTY.
	FS_IOC_READ_VERITY_METADATA uint32 = iowrDir | fsverityReadMetadataArgSize<<iocSizeShift | 'f'<<iocTypeShift | 135
	// FITRIM is _IOWR('X', 121, struct fstrim_range).
	FITRIM uint32 = iowrDir | FstrimRangeSize<<iocSizeShift | 'X'<<iocTypeShift | 121
	// FS_IOC_SHUTDOWN is _IOR('X', 125, __u32) (XFS_IOC_GOINGDOWN): the
	// argument is read by the filesystem despite the _IOR direction, so
	// FUSE does not copy it in (see the handler).
	FS_IOC_SHUTDOWN uint32 = IOCRead<<iocDirShift | 4<<iocSizeShift | 'X'<<iocTypeShift | 125
)

// FS_IOC_SHUTDOWN flags (XFS_FSOP_GOING_FLAGS_*).
const (
	ShutdownDefault    uint32 = 0 // flush data and log, then shut down
	ShutdownLogFlush   uint32 = 1 // flush the log, then shut down
	ShutdownNoLogFlush uint32 = 2 // shut down at once
)

// ErrShortBuffer is returned (wrapped) when a buffer is smaller than the
// structure being decoded or encoded.
var ErrShortBuffer = errors.New("buffer too short")

// byteOrder is the layout FUSE uses for ioctl payloads: the kernel copies
// the caller's struct verbatim, so it is host order, and every platform
// go-fuse supports in practice is little-endian.
var byteOrder = binary.LittleEndian

// WriteStream is struct fs_write_stream:
//
//	struct fs_write_stream {
//		__u32 op_flags;
//		union { __u32 stream_id; __u32 max_streams; };
//		__u64 rsvd;
//	};
//
// StreamID doubles as max_streams in an OpGetMax reply. The Go layout
// matches the C one (no padding), so a *WriteStream can be handed to the
// kernel directly.
type WriteStream struct {
	OpFlags  uint32
	StreamID uint32
	Rsvd     uint64
}

// MaxStreams reads the union as max_streams, for OpGetMax replies.
func (ws WriteStream) MaxStreams() uint32 { return ws.StreamID }

// Encode writes the 16-byte wire form of ws into b[:WriteStreamSize]. It
// refuses a short b instead of panicking, because b usually comes from the
// kernel (FUSE output buffer) and its size is whatever the caller's command
// encoded.
func (ws WriteStream) Encode(b []byte) error {
	if len(b) < WriteStreamSize {
		return fmt.Errorf("encode fs_write_stream into %d bytes, need %d: %w",
			len(b), WriteStreamSize, ErrShortBuffer)
	}
	byteOrder.PutUint32(b[0:4], ws.OpFlags)
	byteOrder.PutUint32(b[4:8], ws.StreamID)
	byteOrder.PutUint64(b[8:16], ws.Rsvd)
	return nil
}

// Bytes returns the 16-byte wire form of ws.
func (ws WriteStream) Bytes() []byte {
	b := make([]byte, WriteStreamSize)
	// Cannot fail: b has exactly the required size.
	_ = ws.Encode(b)
	return b
}

// DecodeWriteStream parses the wire form. Input shorter than 16 bytes is an
// error: reading it as zeros would turn a truncated request into a valid
// one. Bytes past the struct are ignored.
func DecodeWriteStream(b []byte) (WriteStream, error) {
	if len(b) < WriteStreamSize {
		return WriteStream{}, fmt.Errorf("decode fs_write_stream from %d bytes, need %d: %w",
			len(b), WriteStreamSize, ErrShortBuffer)
	}
	return WriteStream{
		OpFlags:  byteOrder.Uint32(b[0:4]),
		StreamID: byteOrder.Uint32(b[4:8]),
		Rsvd:     byteOrder.Uint64(b[8:16]),
	}, nil
}

// FstrimRange is struct fstrim_range, the FITRIM argument:
//
//	struct fstrim_range { __u64 start; __u64 len; __u64 minlen; };
//
// On return the kernel convention is that Len holds the number of bytes
// trimmed.
type FstrimRange struct {
	Start  uint64
	Len    uint64
	MinLen uint64
}

// Encode writes the 24-byte wire form of r into b[:FstrimRangeSize].
func (r FstrimRange) Encode(b []byte) error {
	if len(b) < FstrimRangeSize {
		return fmt.Errorf("encode fstrim_range into %d bytes, need %d: %w",
			len(b), FstrimRangeSize, ErrShortBuffer)
	}
	byteOrder.PutUint64(b[0:8], r.Start)
	byteOrder.PutUint64(b[8:16], r.Len)
	byteOrder.PutUint64(b[16:24], r.MinLen)
	return nil
}

// Bytes returns the 24-byte wire form of r.
func (r FstrimRange) Bytes() []byte {
	b := make([]byte, FstrimRangeSize)
	// Cannot fail: b has exactly the required size.
	_ = r.Encode(b)
	return b
}

// DecodeFstrimRange parses the wire form, refusing short input.
func DecodeFstrimRange(b []byte) (FstrimRange, error) {
	if len(b) < FstrimRangeSize {
		return FstrimRange{}, fmt.Errorf("decode fstrim_range from %d bytes, need %d: %w",
			len(b), FstrimRangeSize, ErrShortBuffer)
	}
	return FstrimRange{
		Start:  byteOrder.Uint64(b[0:8]),
		Len:    byteOrder.Uint64(b[8:16]),
		MinLen: byteOrder.Uint64(b[16:24]),
	}, nil
}

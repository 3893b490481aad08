package ioctl

import "fmt"

// streamfs's own query ioctl: the tools (bmap, stats, info) read a JSON
// document from the daemon in pages, because a FUSE ioctl moves at most
// _IOC_SIZE(cmd) bytes each way.
//
// Input (first 16 bytes): u32 kind, u32 zero, u64 byte offset into the
// document. Output (QueryPageSize bytes): u64 total document length,
// u32 bytes in this page, u32 zero, then the bytes.
const (
	QueryPageSize   = 4096
	queryHeaderSize = 16
	QueryDataSize   = QueryPageSize - queryHeaderSize

	QueryBmap  uint32 = 1 // extents of the file the descriptor refers to
	QueryStats uint32 = 2 // allocator and stream statistics of the mount
	QueryInfo  uint32 = 3 // geometry of the mounted filesystem
	// QueryStream is the stream of any file or directory and where it came
	// from (bmap's document holds it too, but only for regular files).
	QueryStream uint32 = 4
)

// STREAMFS_IOC_QUERY = _IOWR('S', 1, 4096).
var STREAMFS_IOC_QUERY = IOWR('S', 1, QueryPageSize)

// QueryRequest is the decoded input of a query.
type QueryRequest struct {
	Kind   uint32
	Offset uint64
}

// DecodeQuery decodes a query input buffer.
func DecodeQuery(b []byte) (QueryRequest, error) {
	if len(b) < queryHeaderSize {
		return QueryRequest{}, fmt.Errorf("decode query from %d bytes: %w", len(b), ErrShortBuffer)
	}
	return QueryRequest{Kind: byteOrder.Uint32(b[0:]), Offset: byteOrder.Uint64(b[8:])}, nil
}

// EncodeQueryPage fills out (QueryPageSize bytes) with the page of doc at off.
func EncodeQueryPage(out []byte, doc []byte, off uint64) error {
	if len(out) < QueryPageSize {
		return fmt.Errorf("encode query page into %d bytes: %w", len(out), ErrShortBuffer)
	}
	clear(out)
	var chunk []byte
	if off < uint64(len(doc)) {
		chunk = doc[off:min(uint64(len(doc)), off+QueryDataSize)]
	}
	byteOrder.PutUint64(out[0:], uint64(len(doc)))
	byteOrder.PutUint32(out[8:], uint32(len(chunk)))
	copy(out[queryHeaderSize:], chunk)
	return nil
}

// Query reads a whole query document through the descriptor.
func Query(fd uintptr, kind uint32) ([]byte, error) {
	var doc []byte
	page := make([]byte, QueryPageSize)
	for {
		clear(page)
		byteOrder.PutUint32(page[0:], kind)
		byteOrder.PutUint64(page[8:], uint64(len(doc)))
		if err := ioctlPtr(fd, STREAMFS_IOC_QUERY, page); err != nil {
			return nil, fmt.Errorf("streamfs query: %w", err)
		}
		total := byteOrder.Uint64(page[0:])
		n := byteOrder.Uint32(page[8:])
		if n > QueryDataSize {
			return nil, fmt.Errorf("streamfs query: page of %d bytes", n)
		}
		doc = append(doc, page[queryHeaderSize:queryHeaderSize+n]...)
		if uint64(len(doc)) >= total || n == 0 {
			return doc, nil
		}
	}
}

// Fitrim runs FITRIM on fd (a file or directory of the filesystem).
func Fitrim(fd uintptr, r *FstrimRange) error {
	b := r.Bytes()
	if err := ioctlPtr(fd, FITRIM, b); err != nil {
		return fmt.Errorf("FITRIM: %w", err)
	}
	got, err := DecodeFstrimRange(b)
	if err != nil {
		return err
	}
	*r = got
	return nil
}

package format

import (
	"encoding/binary"
	"fmt"
)

// Metadata records. The journal and the checkpoint payload are both a
// sequence of records:
//
//	off size field
//	  0    1 type (Rec*)
//	  1    4 body length n
//	  5    n body
//
// Bodies (strings are a u16 length then bytes; values a u32 length then bytes):
//
//	RecInode     ino u64, mode u32, uid u32, gid u32, nlink u32, size u64,
//	             atime i64, mtime i64, ctime i64, btime i64 (unix ns),
//	             flags u32, stream u32, rdev u32, parent u64, gen u32,
//	             blocks u64 (device blocks mapped), stream source u8,
//	             target string (symlinks)
//	RecFree      ino u64                      inode and its extents are gone
//	RecLink      parent u64, ino u64, mode u32, name   directory entry added/replaced
//	             (mode: the child's type bits, kept in the entry for readdir)
//	RecUnlink    parent u64, name             directory entry removed
//	RecMap       ino u64, lblk u64, len u64, pblk u64, flags u32, stream u32
//	             file blocks [lblk, lblk+len) now map to pblk.. (replacing
//	             whatever mapped there)
//	RecPunch     ino u64, lblk u64, len u64   file blocks become a hole
//	RecXattr     ino u64, name string, value  set
//	RecXattrDel  ino u64, name string
//
// Types 9 and 10 were the inode-number allocator and directory rotor
// records of format v1; v2 keeps that state in the AG trees (keys.go) and
// never writes them, so they decode as unknown types. Do not reuse them.
//
// Freed blocks are not recorded: applying RecMap, RecPunch and RecFree to
// the trees moves the blocks they release into the free-space records.
const (
	RecInode    = 1
	RecFree     = 2
	RecLink     = 3
	RecUnlink   = 4
	RecMap      = 5
	RecPunch    = 6
	RecXattr    = 7
	RecXattrDel = 8
)

// Extent flags.
const (
	ExtUnwritten = 1
)

// Limits every decoder enforces.
const (
	MaxNameLen    = 255
	MaxTargetLen  = 4095
	MaxXattrName  = 255
	MaxXattrValue = 65536
)

// Where an inode's write stream came from (InodeRec.StreamSrc).
const (
	StreamSrcNone uint8 = 0 // no stream
	StreamSrcSet  uint8 = 1 // set by FS_IOC_WRITE_STREAM
	StreamSrcDir  uint8 = 2 // inherited from the parent directory at create
	StreamSrcRule uint8 = 3 // from a stream rule matching the name at create
)

// InodeRec is the attribute part of an inode.
type InodeRec struct {
	Ino, Size, Parent          uint64
	Mode, UID, GID, Nlink      uint32
	Atime, Mtime, Ctime, Btime int64
	Flags, Stream, Rdev, Gen   uint32
	Blocks                     uint64 // device blocks the file maps
	StreamSrc                  uint8  // where Stream came from (StreamSrc*)
	Target                     string
}

// Record is one decoded record; Type says which fields are meaningful.
type Record struct {
	Type   uint8
	Inode  InodeRec // RecInode
	Ino    uint64   // RecFree, RecLink (child), RecMap, RecPunch, RecXattr*
	Parent uint64   // RecLink, RecUnlink
	Name   string   // RecLink, RecUnlink, RecXattr*
	Value  []byte   // RecXattr
	LBlk   uint64   // RecMap, RecPunch
	Len    uint64   // RecMap, RecPunch
	PBlk   uint64   // RecMap
	Flags  uint32   // RecMap
	Stream uint32   // RecMap
	Mode   uint32   // RecLink: child's type
}

// Encoder appends records to a buffer.
type Encoder struct{ Buf []byte }

func (e *Encoder) u8(v uint8)   { e.Buf = append(e.Buf, v) }
func (e *Encoder) u16(v uint16) { e.Buf = binary.LittleEndian.AppendUint16(e.Buf, v) }
func (e *Encoder) u32(v uint32) { e.Buf = binary.LittleEndian.AppendUint32(e.Buf, v) }
func (e *Encoder) u64(v uint64) { e.Buf = binary.LittleEndian.AppendUint64(e.Buf, v) }
func (e *Encoder) str(s string) { e.u16(uint16(len(s))); e.Buf = append(e.Buf, s...) }

// begin writes the type and a length placeholder; end fills the length.
func (e *Encoder) begin(t uint8) int { e.u8(t); e.u32(0); return len(e.Buf) }
func (e *Encoder) end(start int) {
	binary.LittleEndian.PutUint32(e.Buf[start-4:], uint32(len(e.Buf)-start))
}

// Inode appends a RecInode.
func (e *Encoder) Inode(r *InodeRec) {
	s := e.begin(RecInode)
	e.u64(r.Ino)
	e.u32(r.Mode)
	e.u32(r.UID)
	e.u32(r.GID)
	e.u32(r.Nlink)
	e.u64(r.Size)
	e.u64(uint64(r.Atime))
	e.u64(uint64(r.Mtime))
	e.u64(uint64(r.Ctime))
	e.u64(uint64(r.Btime))
	e.u32(r.Flags)
	e.u32(r.Stream)
	e.u32(r.Rdev)
	e.u64(r.Parent)
	e.u32(r.Gen)
	e.u64(r.Blocks)
	e.u8(r.StreamSrc)
	e.str(r.Target)
	e.end(s)
}

// Free appends a RecFree.
func (e *Encoder) Free(ino uint64) { s := e.begin(RecFree); e.u64(ino); e.end(s) }

// Link appends a RecLink.
func (e *Encoder) Link(parent, ino uint64, mode uint32, name string) {
	s := e.begin(RecLink)
	e.u64(parent)
	e.u64(ino)
	e.u32(mode & 0o170000)
	e.str(name)
	e.end(s)
}

// Unlink appends a RecUnlink.
func (e *Encoder) Unlink(parent uint64, name string) {
	s := e.begin(RecUnlink)
	e.u64(parent)
	e.str(name)
	e.end(s)
}

// Map appends a RecMap.
func (e *Encoder) Map(ino, lblk, n, pblk uint64, flags, stream uint32) {
	s := e.begin(RecMap)
	e.u64(ino)
	e.u64(lblk)
	e.u64(n)
	e.u64(pblk)
	e.u32(flags)
	e.u32(stream)
	e.end(s)
}

// Punch appends a RecPunch.
func (e *Encoder) Punch(ino, lblk, n uint64) {
	s := e.begin(RecPunch)
	e.u64(ino)
	e.u64(lblk)
	e.u64(n)
	e.end(s)
}

// Xattr appends a RecXattr.
func (e *Encoder) Xattr(ino uint64, name string, value []byte) {
	s := e.begin(RecXattr)
	e.u64(ino)
	e.str(name)
	e.u32(uint32(len(value)))
	e.Buf = append(e.Buf, value...)
	e.end(s)
}

// XattrDel appends a RecXattrDel.
func (e *Encoder) XattrDel(ino uint64, name string) {
	s := e.begin(RecXattrDel)
	e.u64(ino)
	e.str(name)
	e.end(s)
}

// Record appends r, whichever its type (Validate it first: a record that
// does not validate would not decode).
func (e *Encoder) Record(r *Record) {
	switch r.Type {
	case RecInode:
		e.Inode(&r.Inode)
	case RecFree:
		e.Free(r.Ino)
	case RecLink:
		e.Link(r.Parent, r.Ino, r.Mode, r.Name)
	case RecUnlink:
		e.Unlink(r.Parent, r.Name)
	case RecMap:
		e.Map(r.Ino, r.LBlk, r.Len, r.PBlk, r.Flags, r.Stream)
	case RecPunch:
		e.Punch(r.Ino, r.LBlk, r.Len)
	case RecXattr:
		e.Xattr(r.Ino, r.Name, r.Value)
	case RecXattrDel:
		e.XattrDel(r.Ino, r.Name)
	}
}

// decoder reads one record body with bounds checks; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) need(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("record truncated: %w", ErrCorrupt)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.need(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.need(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.need(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) str(max int) string {
	v := d.need(2)
	if v == nil {
		return ""
	}
	n := int(binary.LittleEndian.Uint16(v))
	if n > max {
		d.err = fmt.Errorf("string of %d bytes (max %d): %w", n, max, ErrCorrupt)
		return ""
	}
	return string(d.need(n))
}

// ValidName reports whether s may be a directory entry name.
func ValidName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == 0 {
			return false
		}
	}
	return true
}

// DecodeRecords calls fn for every record in b, validating bounds. It stops
// at the first malformed record or the first error fn returns.
func DecodeRecords(b []byte, fn func(*Record) error) error {
	off := 0
	for off < len(b) {
		if len(b)-off < 5 {
			return fmt.Errorf("record header at %d truncated: %w", off, ErrCorrupt)
		}
		t := b[off]
		n := int(binary.LittleEndian.Uint32(b[off+1:]))
		if n < 0 || n > len(b)-off-5 {
			return fmt.Errorf("record at %d: length %d beyond payload: %w", off, n, ErrCorrupt)
		}
		r, err := decodeRecord(t, b[off+5:off+5+n])
		if err != nil {
			return fmt.Errorf("record at %d: %w", off, err)
		}
		if err := fn(r); err != nil {
			return err
		}
		off += 5 + n
	}
	return nil
}

func decodeRecord(t uint8, body []byte) (*Record, error) {
	d := &decoder{b: body}
	r := &Record{Type: t}
	switch t {
	case RecInode:
		in := &r.Inode
		in.Ino = d.u64()
		in.Mode = d.u32()
		in.UID = d.u32()
		in.GID = d.u32()
		in.Nlink = d.u32()
		in.Size = d.u64()
		in.Atime = int64(d.u64())
		in.Mtime = int64(d.u64())
		in.Ctime = int64(d.u64())
		in.Btime = int64(d.u64())
		in.Flags = d.u32()
		in.Stream = d.u32()
		in.Rdev = d.u32()
		in.Parent = d.u64()
		in.Gen = d.u32()
		in.Blocks = d.u64()
		in.StreamSrc = d.u8()
		in.Target = d.str(MaxTargetLen)
		r.Ino = in.Ino
	case RecFree:
		r.Ino = d.u64()
	case RecLink:
		r.Parent = d.u64()
		r.Ino = d.u64()
		r.Mode = d.u32()
		r.Name = d.str(MaxNameLen)
	case RecUnlink:
		r.Parent = d.u64()
		r.Name = d.str(MaxNameLen)
	case RecMap:
		r.Ino = d.u64()
		r.LBlk = d.u64()
		r.Len = d.u64()
		r.PBlk = d.u64()
		r.Flags = d.u32()
		r.Stream = d.u32()
	case RecPunch:
		r.Ino = d.u64()
		r.LBlk = d.u64()
		r.Len = d.u64()
	case RecXattr:
		r.Ino = d.u64()
		r.Name = d.str(MaxXattrName)
		n := d.u32()
		if d.err == nil && n > MaxXattrValue {
			d.err = fmt.Errorf("xattr value of %d bytes: %w", n, ErrCorrupt)
		}
		if v := d.need(int(n)); v != nil {
			r.Value = append([]byte{}, v...)
		}
	case RecXattrDel:
		r.Ino = d.u64()
		r.Name = d.str(MaxXattrName)
	default:
		return nil, fmt.Errorf("unknown record type %d: %w", t, ErrCorrupt)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("record type %d has %d trailing bytes: %w", t, len(d.b), ErrCorrupt)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// Validate checks what every decoded record must satisfy beyond its
// length: decoding runs it, and so does a writer that applies a record
// from its in-memory form, so that what it applies is what replay would.
func (r *Record) Validate() error {
	switch r.Type {
	case RecInode:
		in := &r.Inode
		switch {
		case len(in.Target) > MaxTargetLen:
			return fmt.Errorf("string of %d bytes (max %d): %w", len(in.Target), MaxTargetLen, ErrCorrupt)
		case in.StreamSrc > StreamSrcRule:
			return fmt.Errorf("inode stream source %d: %w", in.StreamSrc, ErrCorrupt)
		case in.Size > 1<<62:
			return fmt.Errorf("inode size %d: %w", in.Size, ErrCorrupt)
		case r.Ino != in.Ino:
			return fmt.Errorf("inode record of %d names inode %d: %w", in.Ino, r.Ino, ErrCorrupt)
		}
	case RecLink, RecUnlink:
		if !ValidName(r.Name) {
			return fmt.Errorf("invalid name %q: %w", r.Name, ErrCorrupt)
		}
		if r.Mode&^0o170000 != 0 {
			return fmt.Errorf("directory entry mode %#o has more than type bits: %w", r.Mode, ErrCorrupt)
		}
	case RecMap:
		if r.Len == 0 || r.LBlk+r.Len < r.LBlk || r.PBlk+r.Len < r.PBlk || r.Flags&^ExtUnwritten != 0 {
			return fmt.Errorf("extent %d+%d at %d flags %#x: %w", r.LBlk, r.Len, r.PBlk, r.Flags, ErrCorrupt)
		}
	case RecPunch:
		if r.Len == 0 || r.LBlk+r.Len < r.LBlk {
			return fmt.Errorf("punch %d+%d: %w", r.LBlk, r.Len, ErrCorrupt)
		}
	case RecXattr, RecXattrDel:
		if len(r.Name) > MaxXattrName {
			return fmt.Errorf("string of %d bytes (max %d): %w", len(r.Name), MaxXattrName, ErrCorrupt)
		}
		if len(r.Value) > MaxXattrValue {
			return fmt.Errorf("xattr value of %d bytes: %w", len(r.Value), ErrCorrupt)
		}
	case RecFree:
	default:
		return fmt.Errorf("unknown record type %d: %w", r.Type, ErrCorrupt)
	}
	return nil
}

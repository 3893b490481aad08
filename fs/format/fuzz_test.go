package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"
	"reflect"
	"strings"
	"testing"
)

func testSuper(t testing.TB) *Super {
	t.Helper()
	sb, err := NewSuper(MkfsParams{SizeBytes: 1 << 30, Label: "fuzz"})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// allRecords is one record of every type, with awkward values.
func allRecords() []*Record {
	return []*Record{
		{Type: RecInode, Ino: 1 << 32, Inode: InodeRec{Ino: 1 << 32, Size: 1 << 40, Parent: 1, Mode: 0o100644, UID: 1000, GID: 1000,
			Nlink: 3, Atime: -1, Mtime: 1 << 62, Ctime: 5, Btime: 6, Flags: 7, Stream: 8, Rdev: 9, Gen: 10}},
		{Type: RecInode, Ino: 7, Inode: InodeRec{Ino: 7, Mode: 0o120777, Size: 12, Target: "../some/where"}},
		{Type: RecFree, Ino: 99},
		{Type: RecLink, Parent: 1, Ino: 2, Name: "name with spaces \xff"},
		{Type: RecUnlink, Parent: 1, Name: strings.Repeat("n", MaxNameLen)},
		{Type: RecMap, Ino: 2, LBlk: 10, Len: 20, PBlk: 3000, Flags: ExtUnwritten, Stream: 3},
		{Type: RecPunch, Ino: 2, LBlk: 0, Len: 1 << 40},
		{Type: RecXattr, Ino: 2, Name: "user.x", Value: []byte{0, 1, 2}},
		{Type: RecXattr, Ino: 2, Name: "user.empty", Value: []byte{}},
		{Type: RecXattrDel, Ino: 2, Name: "user.x"},
	}
}

func decodeAll(b []byte) ([]*Record, error) {
	var out []*Record
	err := DecodeRecords(b, func(r *Record) error { out = append(out, r); return nil })
	return out, err
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range allRecords() {
		var e Encoder
		e.Record(r)
		got, err := decodeAll(e.Buf)
		if err != nil {
			t.Fatalf("type %d: %v", r.Type, err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], r) {
			t.Fatalf("type %d: decoded %+v, want %+v", r.Type, got, r)
		}
	}
	// A stream of all of them decodes in order.
	var e Encoder
	for _, r := range allRecords() {
		e.Record(r)
	}
	got, err := decodeAll(e.Buf)
	if err != nil || !reflect.DeepEqual(got, allRecords()) {
		t.Fatalf("stream: %v", err)
	}
	// fn's error stops decoding and is returned as is.
	stop := errors.New("stop")
	n := 0
	if err := DecodeRecords(e.Buf, func(*Record) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn error: %v after %d records", err, n)
	}
}

// TestRecordValidate: what a writer applies from the in-memory form is
// checked as decoding checks it.
func TestRecordValidate(t *testing.T) {
	for _, r := range allRecords() {
		if err := r.Validate(); err != nil {
			t.Fatalf("type %d: %v", r.Type, err)
		}
	}
	for _, r := range []*Record{
		{Type: RecInode, Inode: InodeRec{Ino: 5}, Ino: 6},
		{Type: RecInode, Inode: InodeRec{Ino: 5, StreamSrc: StreamSrcRule + 1}, Ino: 5},
		{Type: RecInode, Inode: InodeRec{Ino: 5, Target: strings.Repeat("t", MaxTargetLen+1)}, Ino: 5},
		{Type: RecLink, Parent: 1, Ino: 2, Name: "a/b"},
		{Type: RecLink, Parent: 1, Ino: 2, Mode: 0o644, Name: "a"},
		{Type: RecUnlink, Parent: 1, Name: ".."},
		{Type: RecMap, Ino: 2, Len: 0},
		{Type: RecMap, Ino: 2, LBlk: 1, Len: 1, Flags: 2},
		{Type: RecPunch, Ino: 2, LBlk: 1 << 63, Len: 1 << 63},
		{Type: RecXattr, Ino: 2, Name: "user.x", Value: make([]byte, MaxXattrValue+1)},
		{Type: RecXattrDel, Ino: 2, Name: strings.Repeat("x", MaxXattrName+1)},
		{Type: 9},
	} {
		if err := r.Validate(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%+v: Validate %v, want ErrCorrupt", r.Type, err)
		}
	}
}

func TestRecordValidation(t *testing.T) {
	rec := func(f func(e *Encoder)) []byte { var e Encoder; f(&e); return e.Buf }
	body := func(t uint8, b []byte) []byte {
		out := []byte{t, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(out[1:], uint32(len(b)))
		return append(out, b...)
	}
	u64 := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		return b
	}
	cases := map[string][]byte{
		"short header":      {RecFree, 8, 0},
		"length beyond":     body(RecFree, u64(1))[:10],
		"unknown type":      body(200, nil),
		"type zero":         body(0, nil),
		"trailing bytes":    body(RecFree, append(u64(1), 0)),
		"truncated body":    body(RecMap, u64(1, 2, 3)),
		"empty name":        rec(func(e *Encoder) { e.Link(1, 2, 0o100000, "") }),
		"dot name":          rec(func(e *Encoder) { e.Unlink(1, ".") }),
		"dotdot name":       rec(func(e *Encoder) { e.Link(1, 2, 0o100000, "..") }),
		"slash in name":     rec(func(e *Encoder) { e.Link(1, 2, 0o100000, "a/b") }),
		"NUL in name":       rec(func(e *Encoder) { e.Link(1, 2, 0o100000, "a\x00b") }),
		"long name":         rec(func(e *Encoder) { e.Link(1, 2, 0o100000, strings.Repeat("x", MaxNameLen+1)) }),
		"long target":       rec(func(e *Encoder) { e.Inode(&InodeRec{Ino: 1, Target: strings.Repeat("x", MaxTargetLen+1)}) }),
		"huge size":         rec(func(e *Encoder) { e.Inode(&InodeRec{Ino: 1, Size: 1<<62 + 1}) }),
		"empty extent":      rec(func(e *Encoder) { e.Map(1, 0, 0, 100, 0, 0) }),
		"lblk overflow":     rec(func(e *Encoder) { e.Map(1, ^uint64(0), 2, 100, 0, 0) }),
		"pblk overflow":     rec(func(e *Encoder) { e.Map(1, 0, 2, ^uint64(0), 0, 0) }),
		"unknown flags":     rec(func(e *Encoder) { e.Map(1, 0, 2, 100, 2, 0) }),
		"empty punch":       rec(func(e *Encoder) { e.Punch(1, 5, 0) }),
		"punch overflow":    rec(func(e *Encoder) { e.Punch(1, ^uint64(0), 1) }),
		"long xattr name":   rec(func(e *Encoder) { e.Xattr(1, strings.Repeat("x", MaxXattrName+1), nil) }),
		"huge xattr value":  rec(func(e *Encoder) { e.Xattr(1, "user.x", make([]byte, MaxXattrValue+1)) }),
		"xattr value short": body(RecXattr, append(append(u64(1), 1, 0, 'x'), 9, 0, 0, 0, 1)),
	}
	for name, b := range cases {
		if _, err := decodeAll(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// testZonedSuper is a zoned layout: 64 MiB of conventional zones, 16 zones
// of 8 MiB with 6 MiB writable.
func testZonedSuper(t testing.TB) *Super {
	t.Helper()
	sb, err := NewSuper(MkfsParams{SizeBytes: 64 << 20, Label: "zoned", Zones: &ZoneLayout{
		DataStart: 64 << 20, ZoneSize: 8 << 20, ZoneCap: 6 << 20, DataZones: 16}})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestZonedDataArea(t *testing.T) {
	z := testZonedSuper(t)
	zb := z.ZoneBlocks
	for _, c := range []struct {
		start, n uint64
		ok       bool
	}{
		{z.DataStart, 1, true},
		{z.DataStart, z.ZoneCap, true},
		{z.DataStart, z.ZoneCap + 1, false}, // past the capacity
		{z.DataStart + zb - 1, 2, false},    // across zones
		{z.DataStart + 15*zb, z.ZoneCap, true},
		{z.DataStart + 16*zb, 1, false},
		{z.MetaEnd(), 1, false}, // conventional space holds no file data
		{z.DataStart, 0, false},
	} {
		if got := z.InDataArea(c.start, c.n); got != c.ok {
			t.Errorf("InDataArea(%d, %d) = %v", c.start, c.n, got)
		}
	}
	if !z.InMetaArea(z.MetaEnd(), 1) || z.InMetaArea(z.DataStart, 1) {
		t.Error("InMetaArea")
	}
	// Zones without a gap (capacity = size): appends to neighbouring
	// zones make one extent.
	full := *z
	full.ZoneCap = full.ZoneBlocks
	if !full.InDataArea(z.DataStart+zb-1, 2) || !full.InDataArea(z.DataStart, 16*zb) || full.InDataArea(z.DataStart, 16*zb+1) {
		t.Error("InDataArea across gapless zones")
	}
}

func TestSuperRoundTripAndValidation(t *testing.T) {
	sb := testSuper(t)
	got, err := DecodeSuper(sb.Encode())
	if err != nil || *got != *sb {
		t.Fatalf("round trip: %v", err)
	}
	if !bytes.Equal(got.Encode(), sb.Encode()) {
		t.Fatal("re-encoding differs")
	}
	mut := func(f func(s *Super)) []byte { c := *sb; f(&c); return c.Encode() }
	corrupt := map[string][]byte{
		"short":               sb.Encode()[:100],
		"version 0":           mut(func(s *Super) { s.Version = 0 }),
		"block size":          mut(func(s *Super) { s.BlockSize = 3000 }),
		"small block":         mut(func(s *Super) { s.BlockSize = 256 }),
		"no AGs":              mut(func(s *Super) { s.AGCount = 0 }),
		"too many AGs":        mut(func(s *Super) { s.AGCount = MaxAGCount + 1 }),
		"AGs too small":       mut(func(s *Super) { s.AGBlocks = 1 }),
		"empty last AG":       mut(func(s *Super) { s.AGBlocks = s.TotalBlocks }),
		"AG overflow":         mut(func(s *Super) { s.AGBlocks = 1 << 63 }),
		"ckpt in reserved":    mut(func(s *Super) { s.CkptStart = 1 }),
		"ckpt overflow":       mut(func(s *Super) { s.CkptBlocks = 1<<63 + 1; s.JournalStart = s.CkptStart + 2*s.CkptBlocks }),
		"journal start":       mut(func(s *Super) { s.JournalStart++ }),
		"journal too long":    mut(func(s *Super) { s.JournalBlocks = s.TotalBlocks }),
		"journal overflow":    mut(func(s *Super) { s.JournalBlocks = ^uint64(0) - s.JournalStart + 1 }),
		"backup block":        mut(func(s *Super) { s.BackupBlock-- }),
		"total blocks":        mut(func(s *Super) { s.TotalBlocks = 1 << 49 }),
		"zero total":          mut(func(s *Super) { s.TotalBlocks = 0 }),
		"checksum":            append(append([]byte{}, sb.Encode()[:200]...), append([]byte{1}, sb.Encode()[201:]...)...),
		"no metadata blocks":  mut(func(s *Super) { s.CkptBlocks = 1 }),
		"zone fields unzoned": mut(func(s *Super) { s.ZoneBlocks = 1 }),
		"zoned, no zones":     mut(func(s *Super) { s.Incompat = IncompatZoned }),
	}
	z := testZonedSuper(t)
	if got, err := DecodeSuper(z.Encode()); err != nil || *got != *z {
		t.Fatalf("zoned round trip: %v", err)
	}
	zmut := func(f func(s *Super)) []byte { c := *z; f(&c); return c.Encode() }
	for name, b := range map[string][]byte{
		"cap above size":      zmut(func(s *Super) { s.ZoneCap = s.ZoneBlocks + 1 }),
		"zones overlap meta":  zmut(func(s *Super) { s.DataStart = s.TotalBlocks - s.ZoneBlocks }),
		"unaligned zones":     zmut(func(s *Super) { s.DataStart++ }),
		"no sequential zones": zmut(func(s *Super) { s.DataZones = 0 }),
		"zone overflow":       zmut(func(s *Super) { s.DataZones = 1 << 62 }),
	} {
		corrupt["zoned "+name] = b
	}
	if v2, err := DecodeSuper(mut(func(s *Super) { s.Version = 2 })); err != nil || v2.Zoned() {
		t.Errorf("version 2 superblock: %v", err)
	}
	if _, err := DecodeSuper(mut(func(s *Super) { s.Version = 1 })); !errors.Is(err, ErrOldFormat) {
		t.Errorf("version 1: %v, want ErrOldFormat", err)
	}
	for name, b := range corrupt {
		if _, err := DecodeSuper(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := DecodeSuper(make([]byte, SuperSize)); !errors.Is(err, ErrNotStreamfs) {
		t.Errorf("zeros: %v, want ErrNotStreamfs", err)
	}
	if _, err := DecodeSuper(mut(func(s *Super) { s.Version = Version + 1 })); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("newer version: %v", err)
	}
	if _, err := DecodeSuper(mut(func(s *Super) { s.Incompat = IncompatSupported << 1 })); !errors.Is(err, ErrNewerFormat) {
		t.Errorf("incompat feature: %v", err)
	}
	if s, err := DecodeSuper(mut(func(s *Super) { s.ROCompat = 1; s.Compat = 1 })); err != nil || !s.ReadOnlyOnly() {
		t.Errorf("ro-compat feature: %v", err)
	}
}

func TestHeadersRoundTripAndValidation(t *testing.T) {
	uuid := [16]byte{1, 2, 3}
	ch := CkptHeader{Seq: 5, JournalSeq: 9, JournalPos: 3, PayloadLen: 4000, PayloadCRC: 0xdeadbeef, UUID: uuid}
	got, err := DecodeCkptHeader(ch.Encode(), uuid, 4096)
	if err != nil || *got != ch {
		t.Fatalf("checkpoint header: %v", err)
	}
	for name, f := range map[string]func() error{
		"short":     func() error { _, err := DecodeCkptHeader(ch.Encode()[:63], uuid, 4096); return err },
		"foreign":   func() error { _, err := DecodeCkptHeader(ch.Encode(), [16]byte{9}, 4096); return err },
		"too large": func() error { _, err := DecodeCkptHeader(ch.Encode(), uuid, 3999); return err },
		"magic":     func() error { b := ch.Encode(); b[0] = 'X'; _, err := DecodeCkptHeader(b, uuid, 4096); return err },
		"checksum":  func() error { b := ch.Encode(); b[20]++; _, err := DecodeCkptHeader(b, uuid, 4096); return err },
	} {
		if err := f(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("checkpoint header %s: %v", name, err)
		}
	}
	jh := JournalHeader{Seq: 77, Blocks: 3, PayloadLen: 8000, PayloadCRC: 1, UUID: uuid}
	gotj, err := DecodeJournalHeader(jh.Encode(), uuid, 4096, 100)
	if err != nil || *gotj != jh {
		t.Fatalf("journal header: %v", err)
	}
	for name, f := range map[string]func() error{
		"short":          func() error { _, err := DecodeJournalHeader(jh.Encode()[:47], uuid, 4096, 100); return err },
		"foreign":        func() error { _, err := DecodeJournalHeader(jh.Encode(), [16]byte{}, 4096, 100); return err },
		"beyond journal": func() error { _, err := DecodeJournalHeader(jh.Encode(), uuid, 4096, 2); return err },
		"blocks":         func() error { _, err := DecodeJournalHeader(jh.Encode(), uuid, 512, 100); return err },
		"magic": func() error {
			b := jh.Encode()
			b[1] = 0
			_, err := DecodeJournalHeader(b, uuid, 4096, 100)
			return err
		},
		"checksum": func() error { b := jh.Encode(); b[30]++; _, err := DecodeJournalHeader(b, uuid, 4096, 100); return err },
	} {
		if err := f(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("journal header %s: %v", name, err)
		}
	}
}

func FuzzDecodeSuper(f *testing.F) {
	sb := testSuper(f)
	f.Add(sb.Encode())
	for _, size := range []int64{32 << 20, 5 << 40} {
		s, err := NewSuper(MkfsParams{SizeBytes: size, BlockSize: 4096})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s.Encode())
	}
	f.Add(make([]byte, SuperSize))
	f.Add(testZonedSuper(f).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSuper(b)
		if err != nil {
			if s != nil {
				t.Fatal("error with a superblock")
			}
			return
		}
		// Whatever validates must be usable without overflow: the AG
		// geometry covers the device, every AG owns blocks, the metadata
		// area ends before the backup superblock.
		hi, lo := bits.Mul64(uint64(s.AGCount), s.AGBlocks)
		if hi == 0 && lo < s.TotalBlocks {
			t.Fatalf("AGs %d x %d do not cover %d blocks", s.AGCount, s.AGBlocks, s.TotalBlocks)
		}
		if hi, lo := bits.Mul64(uint64(s.AGCount-1), s.AGBlocks); hi != 0 || lo >= s.TotalBlocks {
			t.Fatalf("last of %d AGs of %d blocks is empty (%d blocks)", s.AGCount, s.AGBlocks, s.TotalBlocks)
		}
		if s.CkptStart+2*s.CkptBlocks != s.JournalStart || s.JournalStart < s.CkptStart || s.MetaEnd() < s.JournalStart ||
			s.MetaEnd() >= s.BackupBlock || s.BackupBlock >= s.TotalBlocks || s.CkptBlocks > s.TotalBlocks {
			t.Fatalf("metadata area does not fit: %+v", s)
		}
		if hi, lo := bits.Mul64(s.TotalBlocks, uint64(s.BlockSize)); hi != 0 || lo >= 1<<63 {
			t.Fatalf("device bytes overflow: %+v", s)
		}
		// Zoned: the sequential zones follow the conventional space and
		// their block numbers and byte offsets cannot overflow.
		if s.Zoned() && (s.DataStart < s.TotalBlocks || s.DataEnd() <= s.DataStart || s.DataEnd() > 1<<48 ||
			s.ZoneCap > s.ZoneBlocks || s.InDataArea(s.MetaEnd(), 1)) {
			t.Fatalf("zone geometry does not fit: %+v", s)
		}
		s2, err := DecodeSuper(s.Encode())
		if err != nil || *s2 != *s {
			t.Fatalf("re-encoding: %v", err)
		}
	})
}

func FuzzDecodeCkptHeader(f *testing.F) {
	uuid := testSuper(f).UUID
	h := CkptHeader{Seq: 3, JournalSeq: 10, JournalPos: 7, PayloadLen: 100, PayloadCRC: Checksum([]byte("x")), UUID: uuid}
	f.Add(h.Encode(), uint64(1<<20))
	f.Add(h.Encode(), uint64(99))
	f.Add(make([]byte, CkptHeaderSize), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, maxPayload uint64) {
		h, err := DecodeCkptHeader(b, uuid, maxPayload)
		if err != nil {
			return
		}
		if h.UUID != uuid || h.PayloadLen > maxPayload {
			t.Fatalf("accepted %+v", h)
		}
		if !bytes.Equal(h.Encode(), b[:CkptHeaderSize]) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeJournalHeader(f *testing.F) {
	uuid := testSuper(f).UUID
	h := JournalHeader{Seq: 42, Blocks: 2, PayloadLen: 300, PayloadCRC: 5, UUID: uuid}
	f.Add(h.Encode(), uint32(4096), uint64(512))
	f.Add(h.Encode(), uint32(512), uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, bs uint32, journalBlocks uint64) {
		if bs < 512 || bs&(bs-1) != 0 || bs > 65536 {
			return // the superblock guarantees a sane block size
		}
		h, err := DecodeJournalHeader(b, uuid, bs, journalBlocks)
		if err != nil {
			return
		}
		if h.Blocks < 1 || uint64(h.Blocks) > journalBlocks || uint64(h.PayloadLen) > uint64(h.Blocks)*uint64(bs) {
			t.Fatalf("accepted %+v for %d blocks of %d", h, journalBlocks, bs)
		}
		if !bytes.Equal(h.Encode(), b[:JournalHdrSize]) {
			t.Fatal("re-encoding differs")
		}
	})
}

func FuzzDecodeRecords(f *testing.F) {
	var all Encoder
	for _, r := range allRecords() {
		var e Encoder
		e.Record(r)
		f.Add(e.Buf)
		all.Record(r)
	}
	f.Add(all.Buf)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var recs []*Record
		err := DecodeRecords(b, func(r *Record) error {
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// The encoding is canonical: what decodes re-encodes to the input.
		var e Encoder
		for _, r := range recs {
			switch r.Type {
			case RecMap:
				if r.Len == 0 || r.LBlk+r.Len < r.LBlk || r.PBlk+r.Len < r.PBlk {
					t.Fatalf("accepted extent %+v", r)
				}
			case RecLink, RecUnlink:
				if !ValidName(r.Name) {
					t.Fatalf("accepted name %q", r.Name)
				}
			}
			e.Record(r)
		}
		if !bytes.Equal(e.Buf, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", e.Buf, b)
		}
	})
}

// New filesystems get RFC 4122 version-4 UUIDs.
func TestUUIDVersion4(t *testing.T) {
	s, err := NewSuper(MkfsParams{SizeBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	u := UUIDString(s.UUID)
	if u[14] != '4' || !strings.ContainsRune("89ab", rune(u[19])) {
		t.Errorf("uuid %s lacks the version 4 / RFC 4122 variant bits", u)
	}
}

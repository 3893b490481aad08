package nvme

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/backend/zoned"
)

// The command encodings against the ZNS specification's layouts (and
// struct nvme_zone_mgmt_send_cmd / nvme_zone_mgmt_recv_cmd of Linux's
// include/linux/nvme.h: slba in CDW10-11, zsa and select_all in bytes 0
// and 1 of CDW13; numd in CDW12, zra, zrasf and pr in bytes 0-2 of CDW13).
func TestZNSCommandEncoding(t *testing.T) {
	c10, c11, c13 := zoneMgmtSendCDW(0x1_0000_0200, backend.ZoneOpReset, false)
	if c10 != 0x200 || c11 != 1 || c13 != 0x04 {
		t.Errorf("reset: %#x %#x %#x", c10, c11, c13)
	}
	_, _, c13 = zoneMgmtSendCDW(0, backend.ZoneOpFinish, true)
	if c13 != 0x102 {
		t.Errorf("finish all: CDW13 %#x, want 0x102", c13)
	}
	for op, zsa := range map[backend.ZoneOp]uint32{backend.ZoneOpClose: 1, backend.ZoneOpFinish: 2,
		backend.ZoneOpOpen: 3, backend.ZoneOpReset: 4} {
		if _, _, c13 := zoneMgmtSendCDW(0, op, false); c13 != zsa {
			t.Errorf("%v: ZSA %#x, want %#x", op, c13, zsa)
		}
	}
	c10, c11, c12, c13 := zoneMgmtRecvCDW(0x2_0000_0010, 4096)
	if c10 != 0x10 || c11 != 2 || c12 != 1023 || c13 != 0x10000 {
		t.Errorf("report zones: %#x %#x %d %#x", c10, c11, c12, c13)
	}
	c10, c11, c12 = zoneAppendCDW(0x3_0000_0400, 8)
	if c10 != 0x400 || c11 != 3 || c12 != 7 {
		t.Errorf("append: %#x %#x %#x", c10, c11, c12)
	}
	c10, c11 = identifyCSICDW(cnsNSCSI, csiZNS)
	if c10 != 0x05 || c11 != 0x02000000 {
		t.Errorf("identify ZNS namespace: CDW10 %#x CDW11 %#x", c10, c11)
	}
}

func TestParseZoneReport(t *testing.T) {
	b := make([]byte, zoneReportHdr+3*zoneDescSize)
	le64(b, 0, 2) // two descriptors, room for three
	d := b[zoneReportHdr:]
	d[0], d[1] = 0x2, 0x10 // sequential write required, empty
	le64(d, 8, 0x1f000)    // ZCAP
	le64(d, 16, 0)         // ZSLBA
	le64(d, 24, 0)         // WP
	d = b[zoneReportHdr+zoneDescSize:]
	d[0], d[1] = 0x2, 0xe0 // full
	le64(d, 8, 0x1f000)
	le64(d, 16, 0x20000)
	le64(d, 24, ^uint64(0)) // not valid for a full zone: QEMU sends all ones
	zs, err := parseZoneReport(b, 12)
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.Zone{
		{Start: 0, Cap: 0x1f000 << 12, WP: 0, Type: backend.ZoneSeqWriteRequired, Cond: backend.ZoneEmpty},
		{Start: 0x20000 << 12, Cap: 0x1f000 << 12, WP: 0x3f000 << 12, Type: backend.ZoneSeqWriteRequired, Cond: backend.ZoneFull},
	}
	if len(zs) != 2 || zs[0] != want[0] || zs[1] != want[1] {
		t.Fatalf("parsed %+v\nwant   %+v", zs, want)
	}
	le64(b, 0, 4) // more descriptors than the buffer holds
	if _, err := parseZoneReport(b, 12); !errors.Is(err, errShort) {
		t.Errorf("overlong count: %v", err)
	}
	if _, err := parseZoneReport(b[:10], 12); !errors.Is(err, errShort) {
		t.Errorf("short header: %v", err)
	}
	le64(b, 0, 1)
	le64(b, zoneReportHdr+16, 1<<62) // ZSLBA beyond int64 bytes
	if _, err := parseZoneReport(b, 12); err == nil {
		t.Error("ZSLBA out of range accepted")
	}
}

func TestParseIdentifyNSZNS(t *testing.T) {
	b := make([]byte, identifySize)
	le16(b, 2, 1)            // OZCS: read across zone boundaries
	le32(b, 4, 13)           // MAR, zero based
	le32(b, 8, 0xffffffff)   // MOR: no limit
	le64(b, 2816+16, 0x8000) // format 1: zone of 0x8000 blocks
	z, err := parseIdentifyNSZNS(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !z.razb || z.maxActive != 14 || z.maxOpen != 0 || z.zsze != 0x8000 {
		t.Fatalf("parsed %+v", z)
	}
	if _, err := parseIdentifyNSZNS(b, 0); !errors.Is(err, ErrNotZoned) {
		t.Errorf("format without a zone size: %v", err)
	}
	if _, err := parseIdentifyNSZNS(b[:2816], 1); !errors.Is(err, errShort) {
		t.Errorf("truncated: %v", err)
	}
}

func TestZoneStatusErr(t *testing.T) {
	for status, want := range map[uint32]error{
		0x1b8: backend.ErrZoneBoundary, 0x1b9: backend.ErrZoneFull, 0x1ba: backend.ErrZoneReadOnly,
		0x1bb: backend.ErrZoneOffline, 0x41bc: backend.ErrZoneInvalidWrite, // with DNR
		0x1bd: backend.ErrTooManyActive, 0x21be: backend.ErrTooManyOpen, 0x1bf: backend.ErrZoneState,
	} {
		err := zoneStatusErr(&StatusError{Opcode: ioWrite, Status: status})
		var se *StatusError
		if !errors.Is(err, want) || !errors.As(err, &se) {
			t.Errorf("status %#x: %v, want %v with the status kept", status, err, want)
		}
	}
	// Generic status 0xb9 (SCT 0) is not Zone Is Full.
	if err := zoneStatusErr(&StatusError{Status: 0xb9}); errors.Is(err, backend.ErrZoneFull) {
		t.Errorf("SCT 0 mapped to a zone error: %v", err)
	}
}

// znsCtrl is an in-memory zoned namespace: it decodes the commands the
// device sends as a controller does and runs them on the emulated zoned
// device, whose rules answer with the ZNS statuses. So the tests check the
// wire encoding and the zone rules together.
type znsCtrl struct {
	dev   *zoned.Device
	shift uint
	mar   uint32 // zero based; all ones = no limit
	mor   uint32
	razb  bool
	zasl  uint8
	ms    uint16     // metadata bytes per block of the format in use
	mu    sync.Mutex // reads arrive in parallel
	cmds  []uint8    // I/O opcodes in order
}

const znsNSID = 1

func newZNSCtrl(t *testing.T, g zoned.Geometry, zones int) *znsCtrl {
	t.Helper()
	m, err := faulty.NewMem(int64(zones+1)*g.ZoneSize, 512)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zoned.Format(m, g); err != nil {
		t.Fatal(err)
	}
	dev, ok, err := zoned.Load(m, false)
	if err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	c := &znsCtrl{dev: dev, shift: 12, mar: uint32(g.MaxActive) - 1, mor: uint32(g.MaxOpen) - 1}
	if g.MaxActive == 0 {
		c.mar, c.mor = znsNoLimit, znsNoLimit
	}
	return c
}

// status turns a zone rule error into the ZNS status a drive returns.
func (c *znsCtrl) status(op uint8, err error) error {
	if err == nil {
		return nil
	}
	for i, target := range zoneStatuses {
		if errors.Is(err, target) {
			return &StatusError{Opcode: op, Status: 0x4000 | uint32(zoneStatusFirst+i)}
		}
	}
	return fmt.Errorf("controller: %w", err)
}

func (c *znsCtrl) submit(admin bool, cmd *passthru64, buf []byte) (uint64, error) {
	if admin {
		return c.admin(cmd, buf)
	}
	if cmd.nsid != znsNSID {
		return 0, fmt.Errorf("nsid %d", cmd.nsid)
	}
	c.mu.Lock()
	c.cmds = append(c.cmds, cmd.opcode)
	c.mu.Unlock()
	slba := uint64(cmd.cdw11)<<32 | uint64(cmd.cdw10)
	off := int64(slba << c.shift)
	switch cmd.opcode {
	case ioRead, ioWrite:
		n := int64(cmd.cdw12&0xffff+1) << c.shift
		if n != int64(len(buf)) {
			return 0, fmt.Errorf("%d blocks for %d bytes", n>>c.shift, len(buf))
		}
		if cmd.opcode == ioWrite {
			return 0, c.status(cmd.opcode, c.dev.WriteAt(buf, off, 0))
		}
		zs := c.dev.Geometry().ZoneSize
		if !c.razb && off/zs != (off+n-1)/zs {
			return 0, &StatusError{Opcode: ioRead, Status: sctCmdSpecific | 0xb8}
		}
		return 0, c.status(cmd.opcode, c.dev.ReadAt(buf, off))
	case ioFlush:
		return 0, c.dev.Flush()
	case ioZoneMgmtSend:
		if cmd.cdw13&^0xff != 0 {
			return 0, fmt.Errorf("zone management send CDW13 %#x", cmd.cdw13)
		}
		return 0, c.status(cmd.opcode, c.dev.ZoneMgmt(backend.ZoneOp(cmd.cdw13), off))
	case ioZoneMgmtRecv:
		if cmd.cdw13 != 1<<16 || int(cmd.cdw12+1)*4 != len(buf) {
			return 0, fmt.Errorf("zone management receive CDW12 %d CDW13 %#x for %d bytes", cmd.cdw12, cmd.cdw13, len(buf))
		}
		zs, err := c.dev.ReportZones(off, (len(buf)-zoneReportHdr)/zoneDescSize)
		if err != nil {
			return 0, c.status(cmd.opcode, err)
		}
		clear(buf)
		le64(buf, 0, uint64(len(zs)))
		for i, z := range zs {
			d := buf[zoneReportHdr+i*zoneDescSize:]
			d[0], d[1] = byte(z.Type), byte(z.Cond)<<4
			le64(d, 8, uint64(z.Cap>>c.shift))
			le64(d, 16, uint64(z.Start>>c.shift))
			wp := uint64(z.WP >> c.shift)
			if z.Cond == backend.ZoneFull {
				wp = ^uint64(0) // not valid when full; QEMU's value
			}
			le64(d, 24, wp)
		}
		return 0, nil
	case ioZoneAppend:
		n := int64(cmd.cdw12&0xffff+1) << c.shift
		if n != int64(len(buf)) {
			return 0, fmt.Errorf("append of %d blocks for %d bytes", n>>c.shift, len(buf))
		}
		if c.zasl != 0 && n > int64(minPageSize)<<c.zasl {
			return 0, &StatusError{Opcode: ioZoneAppend, Status: 0x02} // invalid field
		}
		at, err := c.dev.Append(buf, off, 0)
		if err != nil {
			return 0, c.status(cmd.opcode, err)
		}
		return uint64(at >> c.shift), nil
	}
	return 0, fmt.Errorf("io opcode %#x", cmd.opcode)
}

func (c *znsCtrl) admin(cmd *passthru64, buf []byte) (uint64, error) {
	if cmd.opcode != adminIdentify || len(buf) != identifySize {
		return 0, fmt.Errorf("admin opcode %#x with %d bytes", cmd.opcode, len(buf))
	}
	clear(buf)
	cns, csi := cmd.cdw10&0xff, cmd.cdw11>>24
	g := c.dev.Geometry()
	switch {
	case cns == cnsNamespace && csi == 0:
		le64(buf, 0, uint64(c.dev.Size())>>c.shift)
		buf[25], buf[26] = 1, 0x01 // two formats, the second in use
		le32(buf, 128, 9<<16)
		le32(buf, 132, uint32(c.shift)<<16|uint32(c.ms))
	case cns == cnsController && csi == 0:
		buf[77] = 5 // 128 KiB
	case cns == cnsNSCSI && csi == csiZNS:
		if c.razb {
			le16(buf, 2, ozcsRAZB)
		}
		le32(buf, 4, c.mar)
		le32(buf, 8, c.mor)
		le64(buf, znsLBAFEOffset+znsLBAFESize, uint64(g.ZoneSize)>>c.shift)
	case cns == cnsCtrlCSI && csi == csiZNS:
		buf[0] = c.zasl
	default:
		return 0, &StatusError{Opcode: cmd.opcode, Admin: true, Status: 0x02}
	}
	return 0, nil
}

func zonedWith(t *testing.T, c *znsCtrl) *ZonedDevice {
	t.Helper()
	d := &Device{path: "test", nsid: znsNSID, submitFn: c.submit}
	z, err := newZoned(d)
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func TestZonedNamespace(t *testing.T) {
	g := zoned.Geometry{ZoneSize: 1 << 20, ZoneCap: 768 << 10, MaxOpen: 2, MaxActive: 3, Sector: 4096}
	c := newZNSCtrl(t, g, 8)
	c.zasl = 3 // appends up to 32 KiB
	z := zonedWith(t, c)
	geo := z.Geometry()
	if geo.ZoneSize != 1<<20 || geo.ZoneCap != 768<<10 || geo.Zones != 8 || geo.MaxOpen != 2 || geo.MaxActive != 3 || geo.Conventional != 0 {
		t.Fatalf("geometry %+v", geo)
	}
	if z.append != 32<<10 || z.SectorSize() != 4096 || z.Size() != 8<<20 || z.Kind() != "zns" || z.MaxStreams() != 0 {
		t.Fatalf("append limit %d sector %d size %d", z.append, z.SectorSize(), z.Size())
	}

	// A write of several commands goes out in order: the zone takes it.
	zone1 := int64(1 << 20)
	big := backend.AlignedBuf(512<<10 + 1)[1:] // not page aligned: bounced
	for i := range big {
		big[i] = byte(i*13 + i>>12)
	}
	c.cmds = nil
	if err := z.WriteAt(big, zone1, 5); err != nil {
		t.Fatal(err)
	}
	if len(c.cmds) != 4 {
		t.Fatalf("512 KiB in %d commands, want 4 of 128 KiB", len(c.cmds))
	}
	got := make([]byte, len(big))
	if err := z.ReadAt(got, zone1); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("zone data differs")
	}
	// The drive's rules come back as the zone errors.
	err := z.WriteAt(big[:4096], zone1, 0)
	var se *StatusError
	if !errors.Is(err, backend.ErrZoneInvalidWrite) || !errors.As(err, &se) {
		t.Fatalf("write below the write pointer: %v", err)
	}
	if err := z.WriteAt(big[:1000], zone1+512<<10, 0); !errors.Is(err, backend.ErrZoneInvalidWrite) {
		t.Fatalf("partial block: %v", err)
	}

	// Appends: the drive says where.
	for i := range 2 {
		at, err := z.Append(big[:16<<10], 2<<20, 0)
		if err != nil || at != 2<<20+int64(i)*16<<10 {
			t.Fatalf("append %d: %d %v", i, at, err)
		}
	}
	if _, err := z.Append(big[:64<<10], 2<<20, 0); !errors.Is(err, backend.ErrZoneInvalidWrite) {
		t.Fatalf("append beyond ZASL: %v", err)
	}

	// Limits: zones 1 and 2 are implicitly open; an explicit open of a
	// third closes one of them, a fourth active zone is refused.
	if err := z.ZoneMgmt(backend.ZoneOpOpen, 3<<20); err != nil {
		t.Fatal(err)
	}
	if err := z.ZoneMgmt(backend.ZoneOpOpen, 4<<20); !errors.Is(err, backend.ErrTooManyActive) {
		t.Fatalf("fourth active zone: %v", err)
	}
	zs, err := z.ReportZones(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 8 {
		t.Fatalf("%d zones reported", len(zs))
	}
	conds := fmt.Sprint(zs[0].Cond, zs[1].Cond, zs[2].Cond, zs[3].Cond)
	if conds != fmt.Sprint(backend.ZoneEmpty, backend.ZoneClosed, backend.ZoneImplicitOpen, backend.ZoneExplicitOpen) {
		t.Fatalf("conditions %s", conds)
	}
	if zs[1].WP != zone1+512<<10 || zs[1].Len != 1<<20 || zs[1].Cap != 768<<10 {
		t.Fatalf("zone 1 %+v", zs[1])
	}

	// Finish, then reset: full, then empty.
	if err := z.ZoneMgmt(backend.ZoneOpFinish, zone1); err != nil {
		t.Fatal(err)
	}
	if zs, _ := z.ReportZones(zone1, 1); zs[0].Cond != backend.ZoneFull {
		t.Fatalf("finished zone is %v", zs[0].Cond)
	}
	if err := z.WriteAt(big[:4096], zone1+512<<10, 0); !errors.Is(err, backend.ErrZoneFull) {
		t.Fatalf("write to a full zone: %v", err)
	}
	if err := z.ZoneMgmt(backend.ZoneOpReset, zone1); err != nil {
		t.Fatal(err)
	}
	if zs, _ := z.ReportZones(zone1, 1); zs[0].Cond != backend.ZoneEmpty || zs[0].WP != zone1 {
		t.Fatalf("reset zone: %+v", zs[0])
	}
	if err := z.ZoneMgmt(backend.ZoneOpReset, zone1+4096); !errors.Is(err, backend.ErrZoneState) {
		t.Fatalf("reset off a zone start: %v", err)
	}

	// Reads across a zone boundary go one zone at a time when the drive
	// cannot cross.
	cross := make([]byte, 64<<10)
	if err := z.ReadAt(cross, 2<<20-32<<10); err != nil {
		t.Fatalf("read across zones: %v", err)
	}
	if !bytes.Equal(cross[32<<10:48<<10], big[:16<<10]) || !bytes.Equal(cross[:32<<10], make([]byte, 32<<10)) {
		t.Fatal("read across zones returned wrong data")
	}
	if err := z.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenZonedRefusesOtherNamespaces(t *testing.T) {
	c := newZNSCtrl(t, zoned.Geometry{ZoneSize: 1 << 20, Sector: 4096}, 4)
	d := &Device{path: "test", nsid: znsNSID, submitFn: func(admin bool, cmd *passthru64, buf []byte) (uint64, error) {
		if admin && cmd.cdw10&0xff == cnsNSCSI {
			return 0, &StatusError{Opcode: cmd.opcode, Admin: true, Status: 0x4002} // an NVM namespace
		}
		return c.submit(admin, cmd, buf)
	}}
	if _, err := newZoned(d); !errors.Is(err, ErrNotZoned) {
		t.Fatalf("NVM namespace: %v", err)
	}
}

// TestZonedKnownBeforeFormat: the command set is asked before the format
// checks, so a zoned namespace streamfs cannot drive (metadata per block)
// is still known as zoned (backend.Open must not fall back to the block
// backend on it), and an FDP namespace is known as not zoned.
func TestZonedKnownBeforeFormat(t *testing.T) {
	c := newZNSCtrl(t, zoned.Geometry{ZoneSize: 1 << 20, Sector: 4096}, 4)
	c.ms = 8
	d := &Device{path: "test", nsid: znsNSID, submitFn: c.submit}
	if _, err := d.identifyZNS(); err != nil {
		t.Fatalf("zoned namespace with metadata: %v", err)
	}
	if _, err := newZoned(d); !errors.Is(err, ErrFormat) || errors.Is(err, ErrNotZoned) {
		t.Fatalf("open of a zoned namespace with metadata: %v, want ErrFormat", err)
	}
	m := fdpModel()
	ns := &memNS{nsid: m.nsid, shift: uint(m.lbads), maxBytes: 1 << 20, ctrl: m}
	fd := &Device{path: "test", nsid: m.nsid, submitFn: ns.submit}
	if _, err := fd.identifyZNS(); !errors.Is(err, ErrNotZoned) {
		t.Fatalf("FDP namespace: %v, want ErrNotZoned", err)
	}
}

// TestCloseWithClaim: closing a namespace opened through its generic node,
// which also holds the block node's claim, succeeds.
func TestCloseWithClaim(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	d := &Device{c: backend.NewClaimed(open("ng0n1"), "ng0n1", false, 0), claim: open("nvme0n1"), path: "ng0n1"}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

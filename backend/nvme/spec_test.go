package nvme

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"unsafe"
)

func TestPassthruLayout(t *testing.T) {
	var c passthru64
	if got := unsafe.Sizeof(c); got != passthru64Size {
		t.Fatalf("sizeof(passthru64) = %d, want 80", got)
	}
	// Offsets of struct nvme_passthru_cmd64 in <linux/nvme_ioctl.h>.
	for _, f := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"nsid", unsafe.Offsetof(c.nsid), 4},
		{"metadata", unsafe.Offsetof(c.metadata), 16},
		{"addr", unsafe.Offsetof(c.addr), 24},
		{"metadata_len", unsafe.Offsetof(c.metadataLen), 32},
		{"data_len", unsafe.Offsetof(c.dataLen), 36},
		{"cdw10", unsafe.Offsetof(c.cdw10), 40},
		{"cdw13", unsafe.Offsetof(c.cdw13), 52},
		{"timeout_ms", unsafe.Offsetof(c.timeoutMs), 64},
		{"result", unsafe.Offsetof(c.result), 72},
	} {
		if f.got != f.want {
			t.Errorf("offset of %s = %d, want %d", f.name, f.got, f.want)
		}
	}
}

func TestIoctlNumbers(t *testing.T) {
	// Values of the <linux/nvme_ioctl.h> macros on x86-64/arm64.
	if ioctlID != 0x4e40 {
		t.Errorf("NVME_IOCTL_ID = %#x, want 0x4e40", ioctlID)
	}
	if ioctlAdmin64 != 0xc0504e47 {
		t.Errorf("NVME_IOCTL_ADMIN64_CMD = %#x, want 0xc0504e47", ioctlAdmin64)
	}
	if ioctlIO64 != 0xc0504e48 {
		t.Errorf("NVME_IOCTL_IO64_CMD = %#x, want 0xc0504e48", ioctlIO64)
	}
}

func TestRWCDWPlacement(t *testing.T) {
	// Write 8 blocks at LBA 0x1_2345_6789 with placement identifier 3.
	c10, c11, c12, c13 := rwCDW(0x1_2345_6789, 8, 3, true)
	if c10 != 0x23456789 || c11 != 0x1 {
		t.Errorf("SLBA dwords = %#x %#x, want 0x23456789 0x1", c10, c11)
	}
	// NLB 7 (zero based) | DTYPE 2 << 20.
	if c12 != 0x00200007 {
		t.Errorf("CDW12 = %#x, want 0x00200007", c12)
	}
	// DSPEC 3 << 16.
	if c13 != 0x00030000 {
		t.Errorf("CDW13 = %#x, want 0x00030000", c13)
	}

	c10, c11, c12, c13 = rwCDW(4096, 0x10000, 0xabcd, true)
	if c10 != 4096 || c11 != 0 || c12 != 0x0020ffff || c13 != 0xabcd0000 {
		t.Errorf("max NLB with pid 0xabcd: %#x %#x %#x %#x", c10, c11, c12, c13)
	}

	// Without a directive: no DTYPE, no DSPEC.
	_, _, c12, c13 = rwCDW(0, 1, 5, false)
	if c12 != 0 || c13 != 0 {
		t.Errorf("unplaced: CDW12 %#x CDW13 %#x, want 0 0", c12, c13)
	}
}

func TestGetLogCDW(t *testing.T) {
	// 64 bytes of log 0x22 for endurance group 1: NUMD 15.
	c10, c11, c12, c13 := getLogCDW(0x22, 1, 64, 0)
	if c10 != 0x000f0022 || c11 != 0x00010000 || c12 != 0 || c13 != 0 {
		t.Errorf("got %#x %#x %#x %#x", c10, c11, c12, c13)
	}
	// 1 MiB: NUMD 0x3ffff splits into NUMDL 0xffff and NUMDU 3.
	c10, c11, c12, c13 = getLogCDW(0x20, 0x102, 1<<20, 0x1_0000_0008)
	if c10 != 0xffff0020 || c11 != 0x01020003 || c12 != 8 || c13 != 1 {
		t.Errorf("got %#x %#x %#x %#x", c10, c11, c12, c13)
	}
}

func le16(b []byte, off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
func le32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }
func le64(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }

func TestParseIdentifyNS(t *testing.T) {
	b := make([]byte, 4096)
	le64(b, 0, 0x40000) // NSZE
	le64(b, 8, 0x40000) // NCAP
	b[25] = 2           // NLBAF: three formats
	b[26] = 0x02        // FLBAS: format 2
	le16(b, 102, 7)     // ENDGID
	le32(b, 128+0, 9<<16)
	le32(b, 128+4, 9<<16|8) // 512 + 8 bytes metadata
	le32(b, 128+8, 12<<16)  // 4096
	ns, err := parseIdentifyNS(b)
	if err != nil {
		t.Fatal(err)
	}
	if ns.nsze != 0x40000 || ns.lbaShift != 12 || ns.metaSize != 0 || ns.endgid != 7 {
		t.Errorf("got %+v", ns)
	}

	b[26] = 0x01
	if ns, _ = parseIdentifyNS(b); ns.lbaShift != 9 || ns.metaSize != 8 {
		t.Errorf("format 1: got %+v", ns)
	}

	// FLBAS bits 6:5 extend the index past 15.
	b[25] = 20
	b[26] = 0x21 // index 0x11
	le32(b, 128+4*17, 12<<16|16)
	if ns, _ = parseIdentifyNS(b); ns.lbaShift != 12 || ns.metaSize != 16 {
		t.Errorf("format 17: got %+v", ns)
	}

	b[25], b[26] = 0, 3 // formatted index beyond NLBAF
	if _, err := parseIdentifyNS(b); err == nil {
		t.Error("index beyond NLBAF accepted")
	}
	if _, err := parseIdentifyNS(b[:100]); !errors.Is(err, errShort) {
		t.Errorf("short buffer: %v", err)
	}
}

func TestParseIdentifyCtrl(t *testing.T) {
	b := make([]byte, 4096)
	b[77] = 5
	le32(b, 96, 1<<19|1<<1)
	c, err := parseIdentifyCtrl(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.mdts != 5 || !c.fdpSupported() {
		t.Errorf("got %+v fdp=%v", c, c.fdpSupported())
	}
	le32(b, 96, 1<<18)
	if c, _ = parseIdentifyCtrl(b); c.fdpSupported() {
		t.Error("bit 18 read as FDP")
	}
	if got := maxTransfer(5, 4096); got != 128<<10 {
		t.Errorf("maxTransfer(5) = %d", got)
	}
	if got := maxTransfer(0, 4096); got != 128<<10 {
		t.Errorf("maxTransfer(0) = %d", got)
	}
	if got := maxTransfer(7, 4096); got != 512<<10 {
		t.Errorf("maxTransfer(7) = %d", got)
	}

	nvm := make([]byte, 4096)
	nvm[0] = 7 // VSL, not DMRL
	nvm[3] = 128
	le32(nvm, 4, 0x80000)
	dmrl, dmrsl, err := parseIdentifyCtrlNVM(nvm)
	if err != nil || dmrl != 128 || dmrsl != 0x80000 {
		t.Errorf("nvm ctrl: %d %d %v", dmrl, dmrsl, err)
	}
}

func TestFDPFeature(t *testing.T) {
	if en, idx := fdpFeature(0x0301); !en || idx != 3 {
		t.Errorf("0x0301: %v %d", en, idx)
	}
	if en, idx := fdpFeature(0x0200); en || idx != 2 {
		t.Errorf("0x0200: %v %d", en, idx)
	}
}

// fdpConfigDesc builds one configuration descriptor as TP4146 lays it out.
func fdpConfigDesc(fdpa uint8, nrg uint32, ruhTypes []uint8, runs uint64, vss int) []byte {
	d := make([]byte, 64+ruhDescSize*len(ruhTypes)+vss)
	le16(d, 0, uint16(len(d)))
	d[2] = fdpa
	d[3] = uint8(vss)
	le32(d, 4, nrg)
	le16(d, 8, uint16(len(ruhTypes)))
	le16(d, 10, uint16(len(ruhTypes)-1))
	le32(d, 12, 1)
	le64(d, 16, runs)
	le32(d, 24, 3600)
	for i, t := range ruhTypes {
		d[64+ruhDescSize*i] = t
	}
	return d
}

func TestParseFDPConfigs(t *testing.T) {
	d0 := fdpConfigDesc(0x80, 1, []uint8{1, 1, 1, 1, 1, 1, 1, 1}, 8<<20, 0)
	d1 := fdpConfigDesc(0x81, 4, []uint8{2, 1}, 1<<30, 12)
	b := make([]byte, 16, 16+len(d0)+len(d1))
	b = append(append(b, d0...), d1...)
	le16(b, 0, 1) // two configurations
	le32(b, 4, uint32(len(b)))
	confs, err := parseFDPConfigs(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(confs) != 2 {
		t.Fatalf("%d configurations, want 2", len(confs))
	}
	c := confs[0]
	if c.nrg != 1 || c.nruh != 8 || c.runs != 8<<20 || c.maxPIDs != 7 || c.erutl != 3600 || c.rgif() != 0 || len(c.ruhTypes) != 8 {
		t.Errorf("config 0: %+v", c)
	}
	c = confs[1]
	if c.nrg != 4 || c.nruh != 2 || c.runs != 1<<30 || c.rgif() != 1 || c.ruhTypes[0] != 2 || c.ruhTypes[1] != 1 {
		t.Errorf("config 1: %+v", c)
	}

	// A descriptor claiming more handles than it holds.
	bad := append([]byte(nil), b...)
	le16(bad, 16+8, 200)
	if _, err := parseFDPConfigs(bad); !errors.Is(err, errShort) {
		t.Errorf("oversized nruh: %v", err)
	}
	// A log truncated before its second descriptor.
	if _, err := parseFDPConfigs(b[:16+len(d0)]); !errors.Is(err, errShort) {
		t.Errorf("truncated: %v", err)
	}
}

func TestParseRUHStatus(t *testing.T) {
	b := make([]byte, 16+3*32)
	le16(b, 14, 3)
	for i := range 3 {
		d := b[16+32*i:]
		le16(d, 0, uint16(i))
		le16(d, 2, uint16(7-i))
		le32(d, 4, 100)
		le64(d, 8, uint64(2048-i*10))
	}
	got, err := parseRUHStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []RUHStatus{{0, 7, 100, 2048}, {1, 6, 100, 2038}, {2, 5, 100, 2028}}
	if len(got) != len(want) {
		t.Fatalf("got %d descriptors", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("descriptor %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	le16(b, 14, 4)
	if _, err := parseRUHStatus(b); !errors.Is(err, errShort) {
		t.Errorf("count beyond buffer: %v", err)
	}
}

func TestParseFDPStats(t *testing.T) {
	b := make([]byte, 64)
	le64(b, 0, 1<<30)
	le64(b, 16, 3<<29)
	le64(b, 32, 1<<20)
	s, err := parseFDPStats(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.hbmw != 1<<30 || s.mbmw != 3<<29 || s.mbe != 1<<20 {
		t.Errorf("got %+v", s)
	}
	b[16+8] = 1 // high half of MBMW
	if s, _ = parseFDPStats(b); s.mbmw != math.MaxUint64 {
		t.Errorf("128-bit overflow: %d", s.mbmw)
	}
	if _, err := parseFDPStats(b[:40]); !errors.Is(err, errShort) {
		t.Errorf("short: %v", err)
	}
}

func TestEncodeDSMRanges(t *testing.T) {
	buf := make([]byte, 4*dsmRangeSize)
	n, covered := encodeDSMRanges(buf, 100, 250, 100)
	if n != 3 || covered != 250 {
		t.Fatalf("got %d ranges covering %d", n, covered)
	}
	wantLen := []uint32{100, 100, 50}
	wantLBA := []uint64{100, 200, 300}
	for i := range n {
		r := buf[i*dsmRangeSize:]
		if l, s := binary.LittleEndian.Uint32(r[4:]), binary.LittleEndian.Uint64(r[8:]); l != wantLen[i] || s != wantLBA[i] {
			t.Errorf("range %d: %d blocks at %d", i, l, s)
		}
	}
	// Buffer full: the caller continues from what was covered.
	n, covered = encodeDSMRanges(buf, 0, 1000, 100)
	if n != 4 || covered != 400 {
		t.Errorf("full buffer: %d ranges covering %d", n, covered)
	}
	// No limit still splits at the 32-bit length field.
	n, covered = encodeDSMRanges(buf, 0, 1<<33, 0)
	if n != 3 || covered != 1<<33 {
		t.Errorf("unlimited: %d ranges covering %d", n, covered)
	}
}

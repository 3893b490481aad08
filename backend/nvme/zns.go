package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"syscall"
	"unsafe"

	"github.com/streamfs/streamfs/backend"
)

// The Zoned Namespace Command Set (NVMe ZNS specification 1.1; Linux
// include/linux/nvme.h): command set identifier 2, three I/O commands, a
// command set specific Identify Namespace and Identify Controller.
const (
	csiZNS         = 2
	cnsNSCSI       = 0x05 // I/O command set specific Identify Namespace
	cnsCtrlCSI     = 0x06 // I/O command set specific Identify Controller
	ioZoneMgmtSend = 0x79
	ioZoneMgmtRecv = 0x7a
	ioZoneAppend   = 0x7d

	zraReport       = 0    // Zone Receive Action: report zones
	zrasfAll        = 0    // ... of every condition
	zoneReportHdr   = 64   // nr_zones (8) and reserved
	zoneDescSize    = 64   // one zone descriptor
	znsLBAFEOffset  = 2816 // LBA format extensions in the ZNS Identify Namespace
	znsLBAFESize    = 16   // ZSZE (8), ZDES (1), reserved
	ozcsRAZB        = 1    // OZCS bit 0: reads may cross zone boundaries
	znsNoLimit      = math.MaxUint32
	statusMask      = 0x7ff // SCT (10:8) and SC (7:0); the ioctl adds CRD, M and DNR above
	sctCmdSpecific  = 0x100
	maxReportZones  = 1 << 14 // descriptors per Zone Management Receive (1 MiB)
	zoneTypeSeqReq  = 0x2
	zoneStateShift  = 4 // ZS is bits 7:4 of the descriptor's byte 1
	identifyCSIBits = 24
)

// ErrNotZoned means the namespace does not use the Zoned Namespace
// command set.
var ErrNotZoned = errors.New("nvme: not a zoned namespace")

// znsInfo is what streamfs needs from the ZNS Identify Namespace.
type znsInfo struct {
	razb      bool   // reads may cross zone boundaries (OZCS bit 0)
	maxActive uint32 // 0 = no limit
	maxOpen   uint32 // 0 = no limit
	zsze      uint64 // zone size in logical blocks
}

// parseIdentifyNSZNS decodes the ZNS command set specific Identify
// Namespace structure: ZOC 1:0, OZCS 3:2, MAR 7:4 and MOR 11:8 (zero based,
// all ones for no limit), and the LBA format extension of format lbaf at
// 2816+16*lbaf (ZSZE 7:0, in logical blocks).
func parseIdentifyNSZNS(b []byte, lbaf int) (znsInfo, error) {
	if lbaf < 0 || lbaf >= 64 || len(b) < znsLBAFEOffset+znsLBAFESize*(lbaf+1) {
		return znsInfo{}, fmt.Errorf("identify namespace (zns): %d bytes for format %d: %w", len(b), lbaf, errShort)
	}
	le := binary.LittleEndian
	limit := func(v uint32) uint32 {
		if v == znsNoLimit {
			return 0
		}
		return v + 1
	}
	z := znsInfo{
		razb:      le.Uint16(b[2:])&ozcsRAZB != 0,
		maxActive: limit(le.Uint32(b[4:])),
		maxOpen:   limit(le.Uint32(b[8:])),
		zsze:      le.Uint64(b[znsLBAFEOffset+znsLBAFESize*lbaf:]),
	}
	if z.zsze == 0 {
		return znsInfo{}, fmt.Errorf("identify namespace (zns): zone size 0 for format %d: %w", lbaf, ErrNotZoned)
	}
	return z, nil
}

// identifyCSICDW returns CDW10 and CDW11 of an Identify for a command set
// specific structure: CNS in CDW10 bits 7:0, CSI in CDW11 bits 31:24.
func identifyCSICDW(cns, csi uint8) (cdw10, cdw11 uint32) {
	return uint32(cns), uint32(csi) << identifyCSIBits
}

// zoneMgmtSendCDW returns CDW10, CDW11 and CDW13 of Zone Management Send:
// the zone's start LBA in CDW11:CDW10, ZSA in CDW13 bits 7:0, Select All
// in bit 8.
func zoneMgmtSendCDW(zslba uint64, zsa backend.ZoneOp, all bool) (cdw10, cdw11, cdw13 uint32) {
	cdw13 = uint32(zsa)
	if all {
		cdw13 |= 1 << 8
	}
	return uint32(zslba), uint32(zslba >> 32), cdw13
}

// zoneMgmtRecvCDW returns CDW10..CDW13 of Zone Management Receive for a
// buffer of numBytes (a multiple of 4): start LBA, NUMD (zero based dword
// count) in CDW12, and in CDW13 ZRA (7:0) report zones, ZRASF (15:8) all
// zones, Partial Report (bit 16), which makes the header count only the
// descriptors that fit.
func zoneMgmtRecvCDW(slba uint64, numBytes uint32) (cdw10, cdw11, cdw12, cdw13 uint32) {
	return uint32(slba), uint32(slba >> 32), numBytes/4 - 1, zraReport | zrasfAll<<8 | 1<<16
}

// zoneAppendCDW returns CDW10..CDW12 of Zone Append of nlb blocks to the
// zone starting at zslba: ZSLBA in CDW11:CDW10, NLB (zero based) in CDW12
// bits 15:0. The LBA written comes back in completion dwords 0 and 1.
func zoneAppendCDW(zslba uint64, nlb uint32) (cdw10, cdw11, cdw12 uint32) {
	return uint32(zslba), uint32(zslba >> 32), (nlb - 1) & 0xffff
}

// parseZoneReport decodes a Zone Management Receive report: nr_zones in
// bytes 7:0 of a 64-byte header, then 64-byte descriptors (ZT 3:0 of byte
// 0, ZS 7:4 of byte 1, ZA byte 2, ZCAP 15:8, ZSLBA 23:16, WP 31:24), in
// logical blocks, converted to bytes with shift. The write pointer of a
// full, read-only or offline zone is not valid (QEMU reports all ones): a
// full zone's is taken as the end of its capacity, the others' as its
// start.
func parseZoneReport(b []byte, shift uint) ([]backend.Zone, error) {
	if len(b) < zoneReportHdr {
		return nil, fmt.Errorf("zone report: %d bytes: %w", len(b), errShort)
	}
	le := binary.LittleEndian
	n := le.Uint64(b)
	if n > uint64(len(b)-zoneReportHdr)/zoneDescSize {
		return nil, fmt.Errorf("zone report: %d zones in %d bytes: %w", n, len(b), errShort)
	}
	out := make([]backend.Zone, n)
	maxLBA := uint64(math.MaxInt64) >> shift
	for i := range out {
		d := b[zoneReportHdr+i*zoneDescSize:]
		zcap, zslba, wp := le.Uint64(d[8:]), le.Uint64(d[16:]), le.Uint64(d[24:])
		cond := backend.ZoneCond(d[1] >> zoneStateShift)
		switch cond {
		case backend.ZoneFull:
			wp = zslba + zcap
		case backend.ZoneReadOnly, backend.ZoneOffline:
			wp = zslba
		}
		if zcap > maxLBA || zslba > maxLBA-zcap || wp > maxLBA {
			return nil, fmt.Errorf("zone report: descriptor %d: LBA out of range", i)
		}
		out[i] = backend.Zone{
			Start: int64(zslba) << shift,
			Cap:   int64(zcap) << shift,
			WP:    int64(wp) << shift,
			Type:  backend.ZoneType(d[0] & 0xf),
			Cond:  cond,
		}
	}
	return out, nil
}

// zoneStatuses are backend's zone errors for the ZNS command specific
// statuses (SCT 1), indexed by SC - 0xB8.
var zoneStatuses = [...]error{
	backend.ErrZoneBoundary,     // 0xB8 Zone Boundary Error
	backend.ErrZoneFull,         // 0xB9 Zone Is Full
	backend.ErrZoneReadOnly,     // 0xBA Zone Is Read Only
	backend.ErrZoneOffline,      // 0xBB Zone Is Offline
	backend.ErrZoneInvalidWrite, // 0xBC Zone Invalid Write
	backend.ErrTooManyActive,    // 0xBD Too Many Active Zones
	backend.ErrTooManyOpen,      // 0xBE Too Many Open Zones
	backend.ErrZoneState,        // 0xBF Invalid Zone State Transition
}

const zoneStatusFirst = sctCmdSpecific | 0xb8

// zoneStatusErr maps the ZNS statuses onto backend's zone errors, keeping
// the StatusError in the chain.
func zoneStatusErr(err error) error {
	var se *StatusError
	if !errors.As(err, &se) {
		return err
	}
	i := int(se.Status&statusMask) - zoneStatusFirst
	if i < 0 || i >= len(zoneStatuses) {
		return err
	}
	return fmt.Errorf("%w: %w", err, zoneStatuses[i])
}

// ZonedDevice is an NVMe zoned namespace driven by passthrough commands,
// which need no zoned block layer in the kernel. Writes go to the write
// pointer in order, one command after another (the FDP path's parallel
// pieces would land out of order); Append lets the drive pick the place.
// Streams choose nothing here: with zones the host separates data by the
// zones it writes.
type ZonedDevice struct {
	// d is a field, not embedded: the FDP methods must not show through.
	d        *Device
	zns      znsInfo
	zoneSize int64 // bytes
	zoneCap  int64 // bytes, from the first zone's descriptor
	zones    int
	append   int64 // largest Zone Append in bytes (ZASL, or the transfer limit)
}

var _ backend.Zoned = (*ZonedDevice)(nil)

// OpenZoned opens a zoned namespace (/dev/ngXnY, or /dev/nvmeXnY where the
// kernel shows one) exclusively. It fails with ErrNotZoned for a namespace
// of another command set.
func OpenZoned(path string, ro bool) (*ZonedDevice, error) {
	z, _, err := openZoned(path, ro)
	return z, err
}

// openZoned is OpenZoned that also reports whether the namespace is known
// to be zoned: true once its ZNS identify answered, so also for a zoned
// namespace that then fails to open (a format streamfs cannot drive), which
// must not be driven as an ordinary disk either.
func openZoned(path string, ro bool) (z *ZonedDevice, zonedNS bool, err error) {
	f, claim, err := openExclusive(path, ro)
	if err != nil {
		return nil, false, err
	}
	d := &Device{c: backend.NewClaimed(f, path, ro, 0), claim: claim, path: path}
	nsid, err := withFdU32(f, namespaceID)
	if err != nil {
		d.Close()
		return nil, false, fmt.Errorf("device %s: %w", path, err)
	}
	d.nsid = nsid
	zi, err := d.identifyZNS()
	if err == nil {
		zonedNS = true
		z, err = newZonedFrom(d, zi)
	}
	if err != nil {
		d.Close()
		return nil, zonedNS, fmt.Errorf("device %s: %w", path, err)
	}
	return z, true, nil
}

// identifyZNS reads the ZNS Identify Namespace of namespace d.nsid; it
// fails with ErrNotZoned when the namespace has another command set. It
// asks before the checks of identifyBase, so that a zoned namespace in a
// format streamfs cannot drive is still known as zoned.
func (d *Device) identifyZNS() (znsInfo, error) {
	buf := backend.AlignedBuf(identifySize)
	if err := d.identifyCmd(cnsNamespace, d.nsid, buf); err != nil {
		return znsInfo{}, err
	}
	ns, err := parseIdentifyNS(buf)
	if err != nil {
		return znsInfo{}, err
	}
	c := passthru64{opcode: adminIdentify, nsid: d.nsid}
	c.cdw10, c.cdw11 = identifyCSICDW(cnsNSCSI, csiZNS)
	if _, err := d.cmd(true, &c, buf); err != nil {
		return znsInfo{}, fmt.Errorf("identify namespace (zns): %w: %w", err, ErrNotZoned)
	}
	return parseIdentifyNSZNS(buf, ns.lbaf)
}

// newZoned identifies d (nsid and command path set) as a zoned namespace.
func newZoned(d *Device) (*ZonedDevice, error) {
	zi, err := d.identifyZNS()
	if err != nil {
		return nil, err
	}
	return newZonedFrom(d, zi)
}

// newZonedFrom sets up d, whose ZNS identify gave zi, as a zoned namespace.
func newZonedFrom(d *Device, zi znsInfo) (*ZonedDevice, error) {
	if _, _, err := d.identifyBase(); err != nil {
		return nil, err
	}
	buf := backend.AlignedBuf(identifySize)
	if zi.zsze > uint64(d.size>>d.lbaShift) {
		return nil, fmt.Errorf("zone size %d blocks beyond the namespace's %d: %w", zi.zsze, d.size>>d.lbaShift, ErrNotZoned)
	}
	z := &ZonedDevice{d: d, zns: zi, zoneSize: int64(zi.zsze) << d.lbaShift}
	z.zones = int(d.size / z.zoneSize)
	z.append = d.chunk
	c := passthru64{opcode: adminIdentify}
	c.cdw10, c.cdw11 = identifyCSICDW(cnsCtrlCSI, csiZNS)
	if _, err := d.cmd(true, &c, buf); err == nil && buf[0] != 0 {
		// ZASL: a power of two in units of the minimum page size.
		z.append = min(z.append, maxTransfer(buf[0], minPageSize))
	}
	d.aio = d.newAlignedIO()
	first, err := z.ReportZones(0, 1)
	if err != nil {
		return nil, err
	}
	if len(first) != 1 || first[0].Cap <= 0 || first[0].Cap > z.zoneSize {
		return nil, fmt.Errorf("zone report of zone 0: %+v: %w", first, ErrNotZoned)
	}
	z.zoneCap = first[0].Cap
	return z, nil
}

// Geometry implements backend.Zoned. A ZNS namespace has no conventional
// zones; a filesystem keeps its metadata elsewhere (another device).
func (z *ZonedDevice) Geometry() backend.ZoneGeometry {
	return backend.ZoneGeometry{ZoneSize: z.zoneSize, ZoneCap: z.zoneCap, Zones: z.zones,
		MaxOpen: int(z.zns.maxOpen), MaxActive: int(z.zns.maxActive), MaxAppend: z.append}
}

// ReportZones implements backend.Zoned with Zone Management Receive, as
// many commands as the zones asked for need.
func (z *ZonedDevice) ReportZones(off int64, max int) ([]backend.Zone, error) {
	if off < 0 || off >= z.d.size {
		return nil, fmt.Errorf("device %s: report zones from %d: %w", z.d.path, off, backend.ErrOutOfRange)
	}
	first := off / z.zoneSize
	want := z.zones - int(first)
	if max > 0 && max < want {
		want = max
	}
	out := make([]backend.Zone, 0, want)
	for len(out) < want {
		n := min(want-len(out), maxReportZones)
		buf := backend.AlignedBuf(zoneReportHdr + n*zoneDescSize)
		slba := uint64((first+int64(len(out)))*z.zoneSize) >> z.d.lbaShift
		c := passthru64{opcode: ioZoneMgmtRecv, nsid: z.d.nsid}
		c.cdw10, c.cdw11, c.cdw12, c.cdw13 = zoneMgmtRecvCDW(slba, uint32(len(buf)))
		if _, err := z.d.cmd(false, &c, buf); err != nil {
			return nil, fmt.Errorf("device %s: zone management receive at LBA %d: %w", z.d.path, slba, zoneStatusErr(err))
		}
		got, err := parseZoneReport(buf, z.d.lbaShift)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", z.d.path, err)
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("device %s: zone report at LBA %d is empty", z.d.path, slba)
		}
		for i := range got {
			got[i].Len = z.zoneSize
		}
		out = append(out, got[:min(len(got), want-len(out))]...)
	}
	return out, nil
}

// ZoneMgmt implements backend.Zoned with Zone Management Send.
func (z *ZonedDevice) ZoneMgmt(op backend.ZoneOp, off int64) error {
	if z.d.readOnly() {
		return fmt.Errorf("device %s: opened read-only: %w", z.d.path, syscall.EROFS)
	}
	if err := z.checkZoneStart(off); err != nil {
		return fmt.Errorf("zone %s: %w", op, err)
	}
	c := passthru64{opcode: ioZoneMgmtSend, nsid: z.d.nsid}
	c.cdw10, c.cdw11, c.cdw13 = zoneMgmtSendCDW(uint64(off)>>z.d.lbaShift, op, false)
	if _, err := z.d.cmd(false, &c, nil); err != nil {
		return fmt.Errorf("device %s: zone %s at %d: %w", z.d.path, op, off, zoneStatusErr(err))
	}
	return nil
}

func (z *ZonedDevice) checkZoneStart(off int64) error {
	if off < 0 || off >= z.d.size || off%z.zoneSize != 0 {
		return fmt.Errorf("device %s: offset %d is not a zone start: %w", z.d.path, off, backend.ErrZoneState)
	}
	return nil
}

// aligned reports whether p can go to the controller without a bounce
// buffer.
func aligned(p []byte) bool {
	return len(p) == 0 || uintptr(unsafe.Pointer(&p[0]))%pageSize == 0
}

// WriteAt implements backend.Device: whole blocks at a zone's write
// pointer, sent in order. A partial block would need a read-modify-write,
// which a sequential zone cannot take.
func (z *ZonedDevice) WriteAt(p []byte, off int64, _ uint32) error {
	if z.d.readOnly() {
		return fmt.Errorf("device %s: opened read-only: %w", z.d.path, syscall.EROFS)
	}
	if err := backend.CheckRange("write", off, int64(len(p)), z.d.size); err != nil {
		return fmt.Errorf("device %s: %w", z.d.path, err)
	}
	if off%z.d.lbaSize != 0 || int64(len(p))%z.d.lbaSize != 0 {
		return fmt.Errorf("device %s: write %d bytes at %d: not whole %d-byte blocks: %w",
			z.d.path, len(p), off, z.d.lbaSize, backend.ErrZoneInvalidWrite)
	}
	var bounce []byte
	for pos := int64(0); pos < int64(len(p)); pos += z.d.chunk {
		piece := p[pos:min(pos+z.d.chunk, int64(len(p)))]
		if !aligned(piece) {
			if bounce == nil {
				bounce = backend.AlignedBuf(int(min(z.d.chunk, int64(len(p)))))
			}
			piece = bounce[:copy(bounce, piece)]
		}
		c := passthru64{opcode: ioWrite, nsid: z.d.nsid}
		c.cdw10, c.cdw11, c.cdw12, c.cdw13 = rwCDW(uint64(off+pos)>>z.d.lbaShift, uint32(int64(len(piece))>>z.d.lbaShift), 0, false)
		if _, err := z.d.cmd(false, &c, piece); err != nil {
			return fmt.Errorf("device %s: write %d bytes at %d: %w", z.d.path, len(piece), off+pos, zoneStatusErr(err))
		}
	}
	return nil
}

// Append implements backend.Zoned with Zone Append: p (whole blocks, up to
// the append size limit) goes to the zone's write pointer, and the drive
// says where.
func (z *ZonedDevice) Append(p []byte, zoneOff int64, _ uint32) (int64, error) {
	if z.d.readOnly() {
		return 0, fmt.Errorf("device %s: opened read-only: %w", z.d.path, syscall.EROFS)
	}
	if err := z.checkZoneStart(zoneOff); err != nil {
		return 0, err
	}
	if len(p) == 0 || int64(len(p))%z.d.lbaSize != 0 || int64(len(p)) > z.append {
		return 0, fmt.Errorf("device %s: append of %d bytes (whole %d-byte blocks up to %d): %w",
			z.d.path, len(p), z.d.lbaSize, z.append, backend.ErrZoneInvalidWrite)
	}
	buf := p
	if !aligned(buf) {
		buf = backend.AlignedBuf(len(p))
		copy(buf, p)
	}
	c := passthru64{opcode: ioZoneAppend, nsid: z.d.nsid}
	c.cdw10, c.cdw11, c.cdw12 = zoneAppendCDW(uint64(zoneOff)>>z.d.lbaShift, uint32(int64(len(p))>>z.d.lbaShift))
	res, err := z.d.cmd(false, &c, buf)
	if err != nil {
		return 0, fmt.Errorf("device %s: zone append of %d bytes at %d: %w", z.d.path, len(p), zoneOff, zoneStatusErr(err))
	}
	at := int64(res) << z.d.lbaShift
	if res > uint64(z.d.size>>z.d.lbaShift) || at < zoneOff || at+int64(len(p)) > zoneOff+z.zoneSize {
		return 0, fmt.Errorf("device %s: zone append to %d: drive reports LBA %d outside the zone", z.d.path, zoneOff, res)
	}
	return at, nil
}

// ReadAt implements backend.Device; a drive that cannot read across zone
// boundaries gets one read per zone.
func (z *ZonedDevice) ReadAt(p []byte, off int64) error {
	if z.zns.razb {
		return z.d.ReadAt(p, off)
	}
	if err := backend.CheckRange("read", off, int64(len(p)), z.d.size); err != nil {
		return fmt.Errorf("device %s: %w", z.d.path, err)
	}
	for len(p) > 0 {
		n := min(int64(len(p)), (off/z.zoneSize+1)*z.zoneSize-off)
		if err := z.d.ReadAt(p[:n], off); err != nil {
			return err
		}
		p, off = p[n:], off+n
	}
	return nil
}

// Discard implements backend.Device: a zoned namespace gets its space back
// by reset, so a discard does nothing, which the Device contract allows.
func (z *ZonedDevice) Discard(off, length int64) error {
	if err := backend.CheckRange("discard", off, length, z.d.size); err != nil {
		return fmt.Errorf("device %s: %w", z.d.path, err)
	}
	return nil
}

// MaxStreams implements backend.Device: no placement handles; zones
// separate the data.
func (z *ZonedDevice) MaxStreams() uint32 { return 0 }

// Kind implements backend.Device.
func (z *ZonedDevice) Kind() string { return "zns" }

// Flush implements backend.Device.
func (z *ZonedDevice) Flush() error { return z.d.Flush() }

// Size implements backend.Device.
func (z *ZonedDevice) Size() int64 { return z.d.size }

// SectorSize implements backend.Device: the namespace's LBA size.
func (z *ZonedDevice) SectorSize() int { return int(z.d.lbaSize) }

// MakeWritable implements backend.Reopener, as Device.MakeWritable.
func (z *ZonedDevice) MakeWritable() error { return z.d.MakeWritable() }

// Close implements backend.Device.
func (z *ZonedDevice) Close() error { return z.d.Close() }

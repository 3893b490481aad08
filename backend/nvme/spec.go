package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// NVMe opcodes, features and log pages used here (NVM Express Base 2.0 and
// the NVM Command Set specification; FDP is TP4146).
const (
	adminGetLogPage = 0x02
	adminIdentify   = 0x06
	adminGetFeature = 0x0a

	ioFlush      = 0x00
	ioWrite      = 0x01
	ioRead       = 0x02
	ioDSM        = 0x09
	ioMgmtRecv   = 0x12
	ioMgmtRecvRU = 0x01 // I/O Management Receive operation: RUH status

	cnsNamespace     = 0x00
	cnsController    = 0x01
	cnsCtrlCSINVM    = 0x06 // I/O command set specific controller (CSI 0)
	featFDP          = 0x1d
	logFDPConfigs    = 0x20
	logFDPStats      = 0x22
	dtypePlacement   = 2
	dsmDeallocate    = 1 << 2
	ctrattFDP        = 1 << 19
	identifySize     = 4096
	ruhDescSize      = 4
	ruhStatusHdrSize = 16
	ruhStatusDescSz  = 32
	fdpStatsSize     = 64
	dsmRangeSize     = 16
	dsmMaxRanges     = 256
)

// errShort is wrapped by every parser when a buffer is smaller than the
// structure the spec defines.
var errShort = errors.New("nvme: data structure truncated")

// nsInfo is what streamfs needs from Identify Namespace (CNS 0).
type nsInfo struct {
	nsze     uint64 // namespace size in logical blocks
	lbaShift uint8  // LBADS of the formatted LBA format
	metaSize uint16 // MS of the formatted LBA format
	endgid   uint16 // endurance group the namespace belongs to
	lbaf     int    // index of the formatted LBA format
}

// parseIdentifyNS decodes the fields of the Identify Namespace data structure
// at their spec offsets: NSZE 7:0, NLBAF 25, FLBAS 26, ENDGID 103:102, LBA
// formats from byte 128 (4 bytes each: MS 15:0, LBADS 23:16).
func parseIdentifyNS(b []byte) (nsInfo, error) {
	if len(b) < 384 {
		return nsInfo{}, fmt.Errorf("identify namespace: %d bytes: %w", len(b), errShort)
	}
	nlbaf := int(b[25]) + 1 // zero based
	flbas := b[26]
	// FLBAS bits 3:0 are the low index bits; bits 6:5 extend it when more
	// than 16 formats exist.
	idx := int(flbas&0x0f) | int(flbas>>5&0x3)<<4
	if idx >= nlbaf || idx >= 64 {
		return nsInfo{}, fmt.Errorf("identify namespace: formatted LBA format %d out of %d", idx, nlbaf)
	}
	lbaf := binary.LittleEndian.Uint32(b[128+4*idx:])
	return nsInfo{
		nsze:     binary.LittleEndian.Uint64(b[0:]),
		lbaShift: uint8(lbaf >> 16),
		metaSize: uint16(lbaf),
		endgid:   binary.LittleEndian.Uint16(b[102:]),
		lbaf:     idx,
	}, nil
}

// ctrlInfo is what streamfs needs from Identify Controller (CNS 1).
type ctrlInfo struct {
	mdts   uint8  // max data transfer size, 2^n min pages; 0 = no limit
	ctratt uint32 // controller attributes
}

func (c ctrlInfo) fdpSupported() bool { return c.ctratt&ctrattFDP != 0 }

// parseIdentifyCtrl reads MDTS (byte 77) and CTRATT (bytes 99:96).
func parseIdentifyCtrl(b []byte) (ctrlInfo, error) {
	if len(b) < 100 {
		return ctrlInfo{}, fmt.Errorf("identify controller: %d bytes: %w", len(b), errShort)
	}
	return ctrlInfo{mdts: b[77], ctratt: binary.LittleEndian.Uint32(b[96:])}, nil
}

// parseIdentifyCtrlNVM reads DMRL (byte 3: ranges per Dataset Management
// command) and DMRSL (bytes 7:4: blocks per range) of the NVM command set
// specific Identify Controller structure (CNS 6, CSI 0); bytes 0..2 are
// VSL, WZSL and WUSL.
func parseIdentifyCtrlNVM(b []byte) (dmrl uint8, dmrsl uint32, err error) {
	if len(b) < 8 {
		return 0, 0, fmt.Errorf("identify controller (NVM): %d bytes: %w", len(b), errShort)
	}
	return b[3], binary.LittleEndian.Uint32(b[4:]), nil
}

// maxTransfer converts MDTS to bytes. MDTS is in units of CAP.MPSMIN, which
// only the register space shows, so the caller passes the minimum page size
// (4096 when unknown). MDTS 0 means no limit; 128 KiB is used then.
func maxTransfer(mdts uint8, minPage int64) int64 {
	const fallback = 128 << 10
	if mdts == 0 {
		return fallback
	}
	if mdts > 20 { // beyond 4 GiB even with 4 KiB pages: treat as unlimited
		return 1 << 30
	}
	return minPage << mdts
}

// fdpFeature decodes the completion dword 0 of Get Features FID 0x1D: bit 0
// FDP enabled, bits 15:8 the index of the FDP configuration in use.
func fdpFeature(result uint64) (enabled bool, confIdx uint8) {
	return result&1 != 0, uint8(result >> 8)
}

// fdpConfig is one FDP configuration descriptor of log page 0x20.
type fdpConfig struct {
	attrs    uint8 // FDPA: bits 3:0 RGIF, bit 4 volatile write cache, bit 7 valid
	nrg      uint32
	nruh     uint16
	maxPIDs  uint16 // zero based
	nnss     uint32
	runs     uint64 // reclaim unit nominal size, bytes
	erutl    uint32
	ruhTypes []uint8 // per reclaim unit handle: 1 initially, 2 persistently isolated
}

// rgif is the number of high PID bits that name the reclaim group.
func (c fdpConfig) rgif() uint8 { return c.attrs & 0xf }

// parseFDPConfigs decodes the FDP configurations log page: a 16-byte header
// (NUMFDPC 1:0 zero based, VER 2, SIZE 7:4) followed by variable sized
// descriptors (DSZE 1:0, FDPA 2, VSS 3, NRG 7:4, NRUH 9:8, MAXPIDS 11:10,
// NNSS 15:12, RUNS 23:16, ERUTL 27:24, then NRUH 4-byte reclaim unit handle
// descriptors (RUHT in byte 0) from byte 64).
func parseFDPConfigs(b []byte) ([]fdpConfig, error) {
	if len(b) < 16 {
		return nil, fmt.Errorf("fdp configurations log: %d bytes: %w", len(b), errShort)
	}
	n := int(binary.LittleEndian.Uint16(b[0:])) + 1
	size := int(binary.LittleEndian.Uint32(b[4:]))
	if size > len(b) {
		return nil, fmt.Errorf("fdp configurations log: size %d > %d bytes read: %w", size, len(b), errShort)
	}
	if size < 16 {
		size = len(b)
	}
	out := make([]fdpConfig, 0, n)
	off := 16
	for i := 0; i < n; i++ {
		if off+64 > size {
			return nil, fmt.Errorf("fdp configurations log: descriptor %d at %d: %w", i, off, errShort)
		}
		d := b[off:size]
		dsze := int(binary.LittleEndian.Uint16(d[0:]))
		c := fdpConfig{
			attrs:   d[2],
			nrg:     binary.LittleEndian.Uint32(d[4:]),
			nruh:    binary.LittleEndian.Uint16(d[8:]),
			maxPIDs: binary.LittleEndian.Uint16(d[10:]),
			nnss:    binary.LittleEndian.Uint32(d[12:]),
			runs:    binary.LittleEndian.Uint64(d[16:]),
			erutl:   binary.LittleEndian.Uint32(d[24:]),
		}
		if dsze < 64+ruhDescSize*int(c.nruh) || dsze > len(d) {
			return nil, fmt.Errorf("fdp configurations log: descriptor %d size %d for %d handles: %w", i, dsze, c.nruh, errShort)
		}
		c.ruhTypes = make([]uint8, c.nruh)
		for h := range c.ruhTypes {
			c.ruhTypes[h] = d[64+ruhDescSize*h]
		}
		out = append(out, c)
		off += dsze
	}
	return out, nil
}

// RUHStatus is one reclaim unit handle status descriptor.
type RUHStatus struct {
	PID   uint16 `json:"pid"`   // placement identifier (reclaim group + handle)
	RUHID uint16 `json:"ruhid"` // reclaim unit handle identifier
	// EARUTR is the estimated active reclaim unit time remaining, seconds.
	EARUTR uint32 `json:"earutr"`
	// RUAMW is the reclaim unit's available media writes, logical blocks.
	RUAMW uint64 `json:"ruamw"`
}

// parseRUHStatus decodes I/O Management Receive operation 1: NRUHSD at bytes
// 15:14, then 32-byte descriptors (PID 1:0, RUHID 3:2, EARUTR 7:4, RUAMW 15:8).
func parseRUHStatus(b []byte) ([]RUHStatus, error) {
	if len(b) < ruhStatusHdrSize {
		return nil, fmt.Errorf("ruh status: %d bytes: %w", len(b), errShort)
	}
	n := int(binary.LittleEndian.Uint16(b[14:]))
	if ruhStatusHdrSize+n*ruhStatusDescSz > len(b) {
		return nil, fmt.Errorf("ruh status: %d descriptors in %d bytes: %w", n, len(b), errShort)
	}
	out := make([]RUHStatus, n)
	for i := range out {
		d := b[ruhStatusHdrSize+i*ruhStatusDescSz:]
		out[i] = RUHStatus{
			PID:    binary.LittleEndian.Uint16(d[0:]),
			RUHID:  binary.LittleEndian.Uint16(d[2:]),
			EARUTR: binary.LittleEndian.Uint32(d[4:]),
			RUAMW:  binary.LittleEndian.Uint64(d[8:]),
		}
	}
	return out, nil
}

// fdpStatsLog is the FDP statistics log page (0x22): three 128-bit byte
// counters at 15:0 (HBMW), 31:16 (MBMW) and 47:32 (MBE).
type fdpStatsLog struct {
	hbmw, mbmw, mbe uint64
}

// parseFDPStats decodes the FDP statistics log. Counters wider than 64 bits
// saturate: 16 EiB is beyond any device this runs on.
func parseFDPStats(b []byte) (fdpStatsLog, error) {
	if len(b) < 48 {
		return fdpStatsLog{}, fmt.Errorf("fdp statistics log: %d bytes: %w", len(b), errShort)
	}
	u128 := func(p []byte) uint64 {
		if binary.LittleEndian.Uint64(p[8:]) != 0 {
			return math.MaxUint64
		}
		return binary.LittleEndian.Uint64(p)
	}
	return fdpStatsLog{hbmw: u128(b[0:]), mbmw: u128(b[16:]), mbe: u128(b[32:])}, nil
}

// rwCDW returns CDW10..CDW13 of a Read or Write of nlb blocks at slba. With
// placed set it adds the data placement directive: DTYPE 2 in CDW12 bits
// 23:20 and the placement identifier in DSPEC, CDW13 bits 31:16.
func rwCDW(slba uint64, nlb uint32, pid uint16, placed bool) (cdw10, cdw11, cdw12, cdw13 uint32) {
	cdw10 = uint32(slba)
	cdw11 = uint32(slba >> 32)
	cdw12 = (nlb - 1) & 0xffff // NLB is zero based
	if placed {
		cdw12 |= dtypePlacement << 20
		cdw13 = uint32(pid) << 16
	}
	return
}

// getLogCDW returns CDW10..CDW13 of Get Log Page for numBytes (a multiple of
// 4) of log lid at byte offset off, with log specific identifier lsi.
func getLogCDW(lid uint8, lsi uint16, numBytes uint32, off uint64) (cdw10, cdw11, cdw12, cdw13 uint32) {
	numd := numBytes/4 - 1 // zero based dword count, split in NUMDL/NUMDU
	cdw10 = uint32(lid) | (numd&0xffff)<<16
	cdw11 = numd>>16 | uint32(lsi)<<16
	cdw12 = uint32(off)
	cdw13 = uint32(off >> 32)
	return
}

// encodeDSMRanges fills buf with Dataset Management ranges (context
// attributes 3:0, length in blocks 7:4, starting LBA 15:8) covering nlb
// blocks from slba, each range at most maxRange blocks. It returns the number
// of ranges written and the blocks covered, which is less than nlb when buf
// is full.
func encodeDSMRanges(buf []byte, slba, nlb uint64, maxRange uint32) (ranges int, covered uint64) {
	if maxRange == 0 {
		maxRange = math.MaxUint32
	}
	for nlb > 0 && (ranges+1)*dsmRangeSize <= len(buf) {
		n := nlb
		if n > uint64(maxRange) {
			n = uint64(maxRange)
		}
		r := buf[ranges*dsmRangeSize:]
		binary.LittleEndian.PutUint32(r[0:], 0)
		binary.LittleEndian.PutUint32(r[4:], uint32(n))
		binary.LittleEndian.PutUint64(r[8:], slba)
		ranges++
		covered += n
		slba += n
		nlb -= n
	}
	return ranges, covered
}

package format

import (
	"crypto/rand"
	"fmt"
	"time"
)

// MkfsParams are the choices mkfs makes from a device size.
type MkfsParams struct {
	SizeBytes int64  // device size
	BlockSize uint32 // 0: 4096
	AGCount   uint32 // 0: like mkfs.xfs
	Label     string
	// Zones, when set, makes the zoned layout: SizeBytes is then the
	// conventional zones' size, which holds all metadata.
	Zones *ZoneLayout
}

// ZoneLayout is a zoned device's shape in bytes, for the zoned layout.
type ZoneLayout struct {
	DataStart int64 // first sequential zone (a multiple of ZoneSize)
	ZoneSize  int64
	ZoneCap   int64
	DataZones uint64
}

func clamp(v, lo, hi uint64) uint64 { return max(lo, min(v, hi)) }

// NewSuper computes the geometry of a new filesystem.
//
// AG count: mkfs.xfs gives a single disk 4 AGs, and AGs of 1 TiB above
// 4 TiB; AGs are never smaller than MinAGBytes. The fixed metadata area is
// the journal (about 1/128 of the device, 2 MiB..128 MiB) and two small
// checkpoint slots (the AG tree roots); every other metadata block is
// allocated from AG space, so the number of files is bounded by space only.
func NewSuper(p MkfsParams) (*Super, error) {
	bs := p.BlockSize
	if bs == 0 {
		bs = 4096
	}
	if bs < MinBlockSize || bs > 65536 || bs&(bs-1) != 0 {
		return nil, fmt.Errorf("block size %d: must be a power of two from %d to 65536", bs, MinBlockSize)
	}
	total := uint64(p.SizeBytes) / uint64(bs)
	size := total * uint64(bs)
	const minSize = 32 << 20
	if size < minSize {
		return nil, fmt.Errorf("device of %d bytes is too small: streamfs needs at least %d MiB", p.SizeBytes, minSize>>20)
	}
	maxAGs := size / MinAGBytes
	agc := uint64(p.AGCount)
	if agc == 0 {
		agc = 4
		if size > 4<<40 {
			agc = (size + (1 << 40) - 1) >> 40
		}
		agc = min(agc, maxAGs)
	} else if agc > maxAGs {
		return nil, fmt.Errorf("%d AGs of at least %d MiB do not fit in %d MiB (at most %d)", agc, MinAGBytes>>20, size>>20, maxAGs)
	}
	if agc > MaxAGCount {
		return nil, fmt.Errorf("AG count %d above the maximum %d", agc, MaxAGCount)
	}
	agBlocks := (total + agc - 1) / agc
	// The last AG must not be empty after rounding up.
	for agc > 1 && (agc-1)*agBlocks >= total {
		agc--
		agBlocks = (total + agc - 1) / agc
	}
	mib := uint64(1<<20) / uint64(bs)
	reserved := max(uint64(ReservedBytes)/uint64(bs), 1)
	journal := clamp(total/128, 2*mib, 128*mib)
	// A checkpoint slot holds a header block and the AG tree roots.
	ckpt := 1 + (agc*8+uint64(bs)-1)/uint64(bs)
	s := &Super{
		Version:       Version,
		BlockSize:     bs,
		AGCount:       uint32(agc),
		TotalBlocks:   total,
		AGBlocks:      agBlocks,
		CkptStart:     reserved,
		CkptBlocks:    ckpt,
		JournalStart:  reserved + 2*ckpt,
		JournalBlocks: journal,
		BackupBlock:   total - 1,
		CTime:         time.Now().UnixNano(),
	}
	if z := p.Zones; z != nil {
		b := int64(bs)
		if z.ZoneSize <= 0 || z.ZoneSize%b != 0 || z.ZoneCap%b != 0 || z.DataStart%b != 0 || z.DataStart < int64(size) {
			return nil, fmt.Errorf("zone size %d, capacity %d, sequential start %d: not whole %d-byte blocks after %d bytes of conventional space",
				z.ZoneSize, z.ZoneCap, z.DataStart, bs, size)
		}
		s.Incompat |= IncompatZoned
		s.DataStart, s.ZoneBlocks, s.ZoneCap, s.DataZones = uint64(z.DataStart/b), uint64(z.ZoneSize/b), uint64(z.ZoneCap/b), z.DataZones
	}
	if len(p.Label) > len(s.Label) {
		return nil, fmt.Errorf("label %q longer than %d bytes", p.Label, len(s.Label))
	}
	copy(s.Label[:], p.Label)
	if _, err := rand.Read(s.UUID[:]); err != nil {
		return nil, fmt.Errorf("uuid: %w", err)
	}
	// RFC 4122 version 4 (random) and variant bits, as blkid and uuidgen expect.
	s.UUID[6] = s.UUID[6]&0x0f | 0x40
	s.UUID[8] = s.UUID[8]&0x3f | 0x80
	if s.MetaEnd()+16 > s.BackupBlock {
		return nil, fmt.Errorf("device too small for the metadata area")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// UUIDString formats a uuid the usual way.
func UUIDString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

package fsck

import (
	"fmt"
	"sort"

	"github.com/streamfs/streamfs/backend"
)

// ZoneUsage is one sequential zone of a zoned filesystem as fsck found it,
// in filesystem blocks.
type ZoneUsage struct {
	Zone    int    `json:"zone"`  // index among the device's zones
	Start   uint64 `json:"start"` // first block
	Cond    string `json:"cond"`  // the device's condition (empty, closed, full, ...)
	Written uint64 `json:"written"`
	// Live blocks are those the extents map; the rest of Written is
	// garbage, which reclaim copies out of and resets.
	Live    uint64 `json:"live"`
	Garbage uint64 `json:"garbage"`
}

// zoneMap is the sequential zones of a zoned filesystem with their write
// pointers, from the device's zone report.
type zoneMap struct {
	start, size, cap uint64 // first block, zone size and capacity in blocks
	zones            []ZoneUsage
	cond             []backend.ZoneCond
}

// loadZones reads the device's zone report for a zoned filesystem and
// holds it against the superblock's geometry: conventional zones under
// the whole metadata area, then the superblock's sequential zones. It
// returns nil (the problem reported) when the write pointers cannot be
// used, and nil without a problem on a filesystem that is not zoned.
func (f *fsck) loadZones() *zoneMap {
	sb := f.img.Super()
	if !sb.Zoned() {
		return nil
	}
	report, ok, err := f.img.ZoneReport()
	switch {
	case err != nil:
		f.problem(false, "zone report: %v: write pointers not checked", err)
		return nil
	case !ok:
		f.problem(false, "the filesystem is zoned but the device has no zones: write pointers not checked")
		return nil
	}
	bs := uint64(sb.BlockSize)
	m := &zoneMap{start: sb.DataStart, size: sb.ZoneBlocks, cap: sb.ZoneCap}
	first := -1
	for i, z := range report {
		switch {
		case uint64(z.Start) < sb.TotalBlocks*bs && z.Type != backend.ZoneConventional:
			f.problem(false, "zone %d (byte %d) holds metadata space but is not conventional: write pointers not checked", i, z.Start)
			return nil
		case uint64(z.Start) == sb.DataStart*bs:
			first = i
		}
	}
	if first < 0 || uint64(len(report)-first) < sb.DataZones {
		f.problem(false, "the device has no %d sequential zones from block %d: write pointers not checked", sb.DataZones, sb.DataStart)
		return nil
	}
	for j := range sb.DataZones {
		z := report[first+int(j)]
		blk := sb.DataStart + j*sb.ZoneBlocks
		if z.Type != backend.ZoneSeqWriteRequired || uint64(z.Start) != blk*bs || uint64(z.Len) != sb.ZoneBlocks*bs ||
			uint64(z.Cap) != sb.ZoneCap*bs || z.WP < z.Start || z.WP > z.Start+z.Cap || (z.WP-z.Start)%int64(bs) != 0 {
			f.problem(false, "zone %d (%+v) differs from the filesystem's geometry (zones of %d blocks, %d writable, from block %d): write pointers not checked",
				first+int(j), z, sb.ZoneBlocks, sb.ZoneCap, sb.DataStart)
			return nil
		}
		m.zones = append(m.zones, ZoneUsage{Zone: first + int(j), Start: blk, Cond: z.Cond.String(), Written: uint64(z.WP-z.Start) / bs})
		m.cond = append(m.cond, z.Cond)
	}
	return m
}

// badExtent says why device blocks [pblk, pblk+n), inside the sequential
// zones (format.Super.InDataArea), hold no data a file may map: a part of
// them lies past its zone's write pointer (reads there return zeroes, and
// the next write lands there) or in an offline zone. "" when they are good.
func (m *zoneMap) badExtent(pblk, n uint64) string {
	for b := pblk; b < pblk+n; {
		j := (b - m.start) / m.size
		zs := m.start + j*m.size
		end := min(pblk+n, zs+m.size)
		z := &m.zones[j]
		switch {
		case m.cond[j] == backend.ZoneOffline:
			return fmt.Sprintf("at block %d lies in offline zone %d", pblk, z.Zone)
		case end > zs+z.Written:
			return fmt.Sprintf("at block %d lies past the write pointer of zone %d (%d of its blocks written)", pblk, z.Zone, z.Written)
		}
		b = end
	}
	return ""
}

// checkZones checks the extents that map the sequential zones (all of them
// good by badExtent): no two files share a block. It counts each zone's
// live blocks and reports the zones that hold garbage as reclaimable, which
// is not an error: freed blocks stay garbage until reclaim resets their
// zone.
func (f *fsck) checkZones(m *zoneMap, exts []owner) {
	sort.SliceStable(exts, func(i, j int) bool { return exts[i].start < exts[j].start })
	var cursor uint64
	var prev owner
	for _, o := range exts {
		if o.start < cursor {
			f.problem(false, "blocks %d+%d (%s) also belong to %s", o.start, o.n, o.what, prev.what)
		}
		if end := o.start + o.n; end > cursor {
			cursor, prev = end, o
		}
		for b := o.start; b < o.start+o.n; {
			j := (b - m.start) / m.size
			end := min(o.start+o.n, m.start+(j+1)*m.size)
			m.zones[j].Live += end - b
			b = end
		}
	}
	var zones int
	var garbage uint64
	for i := range m.zones {
		z := &m.zones[i]
		if z.Written > z.Live { // shared blocks count twice in Live
			z.Garbage = z.Written - z.Live
			zones++
			garbage += z.Garbage
		}
	}
	f.rep.Zones = m.zones
	if zones > 0 {
		f.rep.Notes = append(f.rep.Notes, fmt.Sprintf("%d zones hold %d blocks of garbage (written, no longer mapped): reclaimable, a read-write mount's reclaimer resets them", zones, garbage))
	}
}

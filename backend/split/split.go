// Package split joins a conventional metadata device and a zoned data
// device into one backend.Zoned, for a zoned device without conventional
// zones (a ZNS namespace): the filesystem keeps its metadata (superblock,
// checkpoints, journal, tree nodes) in conventional zones, which here are
// the metadata device, as XFS's zoned mode keeps its metadata on the main
// device and its data on the zoned one.
//
// Address space, with Z the data device's zone size:
//
//	[0, N·Z)              metadata device, as N conventional zones
//	                      (N = its size / Z, rounded down; the rest of
//	                      it is unused)
//	[N·Z, N·Z + data)     the data device's zones, shifted by N·Z
//
// Every request goes to the device its offset falls in; a write or append
// never spans the two (a conventional zone ends where the first data zone
// starts, and no write crosses a zone boundary there), a read or discard
// may and is cut in two. Flush flushes both.
package split

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/streamfs/streamfs/backend"
)

// ErrGeometry means the two devices cannot be joined.
var ErrGeometry = errors.New("split: devices cannot be joined")

func init() {
	backend.SplitOpener = func(meta, data backend.Device, ro bool) (backend.Device, error) {
		z, ok := data.(backend.Zoned)
		if !ok {
			return nil, fmt.Errorf("data device is %s, not zoned: %w", data.Kind(), ErrGeometry)
		}
		d, err := New(meta, z, ro)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
}

// Device is a metadata device and a zoned data device seen as one zoned
// device. It holds no lock of its own: each request goes to one device (or
// one to each), which serialise what they must.
type Device struct {
	meta backend.Device
	data backend.Zoned
	geo  backend.ZoneGeometry
	base int64 // where the data device starts: metaZones·ZoneSize
	ro   atomic.Bool
}

var (
	_ backend.Zoned    = (*Device)(nil)
	_ backend.Reopener = (*Device)(nil)
)

// New joins meta and data, which it owns from then on (Close closes both).
// meta must hold at least one of data's zones, and the zone size must be
// whole sectors of it. ro says both were opened read-only: the joined
// device then refuses writes itself until MakeWritable has turned both.
func New(meta backend.Device, data backend.Zoned, ro bool) (*Device, error) {
	dg := data.Geometry()
	zs := dg.ZoneSize
	if zs <= 0 {
		return nil, fmt.Errorf("data device (%s): zone size %d: %w", data.Kind(), zs, ErrGeometry)
	}
	n := meta.Size() / zs
	if n < 1 {
		return nil, fmt.Errorf("metadata device (%s) of %d bytes holds no zone of %d bytes: %w",
			meta.Kind(), meta.Size(), zs, ErrGeometry)
	}
	if ss := int64(meta.SectorSize()); ss <= 0 || zs%ss != 0 {
		return nil, fmt.Errorf("metadata device (%s): sector of %d bytes does not divide the zone size %d: %w",
			meta.Kind(), ss, zs, ErrGeometry)
	}
	g := dg
	g.Zones += int(n)
	g.Conventional += int(n)
	d := &Device{meta: meta, data: data, geo: g, base: n * zs}
	d.ro.Store(ro)
	return d, nil
}

// MetaZones is the number of conventional zones the metadata device gives.
func (d *Device) MetaZones() int { return int(d.base / d.geo.ZoneSize) }

// Meta returns the metadata device.
func (d *Device) Meta() backend.Device { return d.meta }

// Data returns the zoned data device.
func (d *Device) Data() backend.Zoned { return d.data }

func metaErr(err error) error { return fmt.Errorf("metadata device: %w", err) }
func dataErr(err error) error { return fmt.Errorf("data device: %w", err) }

func (d *Device) errRO() error { return fmt.Errorf("split device opened read-only: %w", syscall.EROFS) }

// Geometry implements backend.Zoned: the data device's, with the
// metadata device's zones added in front as conventional zones.
func (d *Device) Geometry() backend.ZoneGeometry { return d.geo }

// ReadAt implements backend.Device.
func (d *Device) ReadAt(p []byte, off int64) error {
	if err := backend.CheckRange("read", off, int64(len(p)), d.Size()); err != nil {
		return fmt.Errorf("split device: %w", err)
	}
	if n := d.base - off; n > 0 {
		head := p[:min(n, int64(len(p)))]
		if err := d.meta.ReadAt(head, off); err != nil {
			return metaErr(err)
		}
		p, off = p[len(head):], d.base
	}
	if len(p) == 0 {
		return nil
	}
	if err := d.data.ReadAt(p, off-d.base); err != nil {
		return dataErr(err)
	}
	return nil
}

// WriteAt implements backend.Device: anywhere in the metadata device's
// zones, by the data device's rules in its own.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	if d.ro.Load() {
		return d.errRO()
	}
	end := off + int64(len(p))
	if err := backend.CheckRange("write", off, int64(len(p)), d.Size()); err != nil {
		return fmt.Errorf("split device: %w", err)
	}
	switch {
	case end <= d.base:
		if err := d.meta.WriteAt(p, off, stream); err != nil {
			return metaErr(err)
		}
	case off >= d.base:
		if err := d.data.WriteAt(p, off-d.base, stream); err != nil {
			return dataErr(err)
		}
	default:
		return fmt.Errorf("split device: write %d bytes at %d crosses from the metadata device into the first data zone at %d: %w",
			len(p), off, d.base, backend.ErrZoneBoundary)
	}
	return nil
}

// zoneStart checks that off starts a zone of the data device and returns
// it in the data device's offsets.
func (d *Device) zoneStart(off int64) (int64, error) {
	if off < 0 || off >= d.Size() || off%d.geo.ZoneSize != 0 {
		return 0, fmt.Errorf("split device: offset %d is not a zone start: %w", off, backend.ErrZoneState)
	}
	if off < d.base {
		return 0, fmt.Errorf("split device: zone at %d is on the metadata device: %w", off, backend.ErrZoneConventional)
	}
	return off - d.base, nil
}

// Append implements backend.Zoned; the zone is on the data device.
func (d *Device) Append(p []byte, zone int64, stream uint32) (int64, error) {
	if d.ro.Load() {
		return 0, d.errRO()
	}
	z, err := d.zoneStart(zone)
	if err != nil {
		return 0, err
	}
	at, err := d.data.Append(p, z, stream)
	if err != nil {
		return 0, dataErr(err)
	}
	return at + d.base, nil
}

// ZoneMgmt implements backend.Zoned; the metadata device's zones are
// conventional and take no action.
func (d *Device) ZoneMgmt(op backend.ZoneOp, off int64) error {
	if d.ro.Load() {
		return d.errRO()
	}
	z, err := d.zoneStart(off)
	if err != nil {
		return fmt.Errorf("zone %s: %w", op, err)
	}
	if err := d.data.ZoneMgmt(op, z); err != nil {
		return dataErr(err)
	}
	return nil
}

// ReportZones implements backend.Zoned: the metadata device's zones as
// conventional ones, then the data device's report, shifted.
func (d *Device) ReportZones(off int64, limit int) ([]backend.Zone, error) {
	if off < 0 || off >= d.Size() {
		return nil, fmt.Errorf("split device: report zones from %d: %w", off, backend.ErrOutOfRange)
	}
	zs := d.geo.ZoneSize
	var out []backend.Zone
	for start := off / zs * zs; start < d.base && (limit <= 0 || len(out) < limit); start += zs {
		out = append(out, backend.Zone{Start: start, Len: zs, Cap: zs, WP: start,
			Type: backend.ZoneConventional, Cond: backend.ZoneNotWP})
	}
	if limit > 0 && len(out) == limit {
		return out, nil
	}
	rest := 0
	if limit > 0 {
		rest = limit - len(out)
	}
	got, err := d.data.ReportZones(max(off, d.base)-d.base, rest)
	if err != nil {
		return nil, dataErr(err)
	}
	for _, z := range got {
		z.Start += d.base
		z.WP += d.base
		out = append(out, z)
	}
	return out, nil
}

// Flush implements backend.Device: both devices at once, so a journal
// commit waits for the slower one, not for the sum. It returns when both
// are done, so a write issued after it (a commit record) never lands
// before what either device held.
func (d *Device) Flush() error {
	var wg sync.WaitGroup
	var errM error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.meta.Flush(); err != nil {
			errM = metaErr(err)
		}
	}()
	var errD error
	if err := d.data.Flush(); err != nil {
		errD = dataErr(err)
	}
	wg.Wait()
	return errors.Join(errM, errD)
}

// Discard implements backend.Device; a range over both devices is cut at
// the boundary.
func (d *Device) Discard(off, length int64) error {
	if d.ro.Load() {
		return d.errRO()
	}
	if err := backend.CheckRange("discard", off, length, d.Size()); err != nil {
		return fmt.Errorf("split device: %w", err)
	}
	end := off + length
	if off < d.base {
		if err := d.meta.Discard(off, min(end, d.base)-off); err != nil {
			return metaErr(err)
		}
		off = d.base
	}
	if off < end {
		if err := d.data.Discard(off-d.base, end-off); err != nil {
			return dataErr(err)
		}
	}
	return nil
}

// Size implements backend.Device: the metadata device's whole zones, then
// the data device.
func (d *Device) Size() int64 { return d.base + d.data.Size() }

// SectorSize implements backend.Device: the larger of the two, so an
// aligned request suits either device.
func (d *Device) SectorSize() int { return max(d.meta.SectorSize(), d.data.SectorSize()) }

// MaxStreams implements backend.Device: the data device's, where file data
// goes.
func (d *Device) MaxStreams() uint32 { return d.data.MaxStreams() }

// Kind implements backend.Device: the metadata device's kind, then the
// data device's ("file+zns").
func (d *Device) Kind() string { return d.meta.Kind() + "+" + d.data.Kind() }

// MakeWritable implements backend.Reopener: both devices, metadata first.
// Until both are writable the joined device refuses writes, so a failure
// half way leaves it as it was.
func (d *Device) MakeWritable() error {
	if !d.ro.Load() {
		return nil
	}
	if err := backend.MakeWritable(d.meta); err != nil {
		return metaErr(err)
	}
	if err := backend.MakeWritable(d.data); err != nil {
		return dataErr(err)
	}
	d.ro.Store(false)
	return nil
}

// Close implements backend.Device: closes both, whatever either returns.
func (d *Device) Close() error {
	var errM, errD error
	if err := d.meta.Close(); err != nil {
		errM = metaErr(err)
	}
	if err := d.data.Close(); err != nil {
		errD = dataErr(err)
	}
	return errors.Join(errM, errD)
}

// Package zoned is an emulated zoned device on an image file, in the way
// backend/ftl models an FDP drive: it enforces the rules of NVMe ZNS (and
// of SMR disks) — sequential zones written only at their write pointer,
// zone conditions and the open and active limits, reset, finish, open,
// close and zone append — keeps the write pointers in the image, and counts
// what the host wrote and what resets threw away. It lets a filesystem be
// developed and measured for zoned storage on any machine.
package zoned

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/streamfs/streamfs/backend"
)

// ErrGeometry means a zone geometry is invalid or does not fit the image.
var ErrGeometry = errors.New("zoned: invalid geometry")

// Geometry is what a zoned image is formatted with; its spec string is the
// form a command line takes: zone=SIZE,cap=SIZE,conv=N,max_open=N,
// max_active=N,sector=N.
type Geometry struct {
	ZoneSize  int64 // bytes from one zone's start to the next
	ZoneCap   int64 // writable bytes of a sequential zone; 0 = ZoneSize
	Conv      int   // conventional zones, at the start of the device
	MaxOpen   int   // 0 = no limit
	MaxActive int   // 0 = no limit
	Sector    int   // LBA size: 512 or 4096
}

// DefaultGeometry is a small ZNS drive's shape: 64 MiB zones, 4
// conventional zones for metadata, 14 open and active zones (QEMU's and
// many drives' limits are of this order).
func DefaultGeometry() Geometry {
	return Geometry{ZoneSize: 64 << 20, Conv: 4, MaxOpen: 14, MaxActive: 14, Sector: 4096}
}

// Cap returns the writable bytes of a sequential zone.
func (g Geometry) Cap() int64 {
	if g.ZoneCap == 0 {
		return g.ZoneSize
	}
	return g.ZoneCap
}

// Validate checks the geometry on its own; Format checks it against the
// image size.
func (g Geometry) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("zoned geometry: "+format+": %w", append(a, ErrGeometry)...)
	}
	if g.Sector != 512 && g.Sector != 4096 {
		return bad("sector %d, want 512 or 4096", g.Sector)
	}
	if g.ZoneSize < 4096 || g.ZoneSize%4096 != 0 || g.ZoneSize > 1<<40 {
		return bad("zone size %d: want a multiple of 4096 up to 1 TiB", g.ZoneSize)
	}
	if g.ZoneCap < 0 || g.ZoneCap > g.ZoneSize || g.ZoneCap%int64(g.Sector) != 0 {
		return bad("zone capacity %d: want whole sectors up to the zone size %d", g.ZoneCap, g.ZoneSize)
	}
	if g.Conv < 0 || g.MaxOpen < 0 || g.MaxActive < 0 {
		return bad("negative count in %s", g)
	}
	if g.MaxActive > 0 && (g.MaxOpen == 0 || g.MaxOpen > g.MaxActive) {
		return bad("max_open %d exceeds max_active %d", g.MaxOpen, g.MaxActive)
	}
	return nil
}

// String is the spec with every key spelled out.
func (g Geometry) String() string {
	return fmt.Sprintf("zone=%d,cap=%d,conv=%d,max_open=%d,max_active=%d,sector=%d",
		g.ZoneSize, g.Cap(), g.Conv, g.MaxOpen, g.MaxActive, g.Sector)
}

// ParseGeometry reads a spec over the defaults: keys zone, cap, conv,
// max_open, max_active, sector; sizes take K, M, G, T suffixes (powers of
// 1024). An empty spec is the default geometry.
func ParseGeometry(spec string) (Geometry, error) {
	g := DefaultGeometry()
	capSet := false
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Geometry{}, fmt.Errorf("zoned geometry: %q is not key=value: %w", kv, ErrGeometry)
		}
		var err error
		switch k {
		case "zone":
			g.ZoneSize, err = backend.ParseSize(v)
		case "cap":
			g.ZoneCap, err = backend.ParseSize(v)
			capSet = true
		case "conv":
			g.Conv, err = strconv.Atoi(v)
		case "max_open":
			g.MaxOpen, err = strconv.Atoi(v)
		case "max_active":
			g.MaxActive, err = strconv.Atoi(v)
		case "sector":
			g.Sector, err = strconv.Atoi(v)
		default:
			return Geometry{}, fmt.Errorf("zoned geometry: unknown key %q (want zone, cap, conv, max_open, max_active, sector): %w", k, ErrGeometry)
		}
		if err != nil {
			return Geometry{}, fmt.Errorf("zoned geometry: %s=%q: %v: %w", k, v, err, ErrGeometry)
		}
	}
	if !capSet || g.ZoneCap == g.ZoneSize {
		g.ZoneCap = 0
	}
	if err := g.Validate(); err != nil {
		return Geometry{}, err
	}
	return g, nil
}

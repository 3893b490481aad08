// Package ftl models the flash translation layer of an FDP SSD beside an
// image file: page-level mapping, reclaim units filled through reclaim unit
// handles, greedy or cost-benefit garbage collection, and the counters a
// drive keeps (host bytes, media bytes, bytes erased). It does not move data:
// the image holds the host's bytes at their logical offsets, and the model
// only counts what a drive would have written, so that its write
// amplification can be read without owning the hardware.
package ftl

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/streamfs/streamfs/backend"
)

// PageSize is the model's mapping unit, a 4 KiB flash page: host writes are
// counted in whole pages, as a drive formatted with 4 KiB LBAs sees them.
const PageSize = 4096

// ErrGeometry means an --ftl specification cannot describe a drive.
var ErrGeometry = errors.New("bad ftl geometry")

// Geometry is what `mkfs --ftl` chooses; it never changes afterwards.
type Geometry struct {
	// OP is the over-provisioning in percent: the share of physical space
	// the host never sees, (physical - logical) / physical.
	OP float64 `json:"op_percent"`
	// RUSize is the reclaim unit size in bytes, a multiple of PageSize.
	RUSize int64 `json:"ru_size"`
	// Handles is the number of reclaim unit handles (= write streams).
	Handles int `json:"handles"`
	// GC is "greedy" (fewest valid pages) or "cb" (cost-benefit).
	GC string `json:"gc"`
	// Isolation is "initial" (GC may mix handles' data in one unit) or
	// "persistent" (GC keeps each handle's data in units of its own).
	Isolation string `json:"isolation"`
}

// DefaultGeometry is what an --ftl option leaves unsaid.
func DefaultGeometry() Geometry {
	return Geometry{OP: 7, RUSize: 8 << 20, Handles: 8, GC: "greedy", Isolation: "initial"}
}

// String renders g in the syntax ParseGeometry reads.
func (g Geometry) String() string {
	return fmt.Sprintf("op=%s,ru=%s,handles=%d,gc=%s,isolation=%s",
		strconv.FormatFloat(g.OP, 'f', -1, 64), sizeString(g.RUSize), g.Handles, g.GC, g.Isolation)
}

func sizeString(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// ParseGeometry reads "op=7,ru=8M,handles=8[,gc=greedy|cb][,isolation=initial|persistent]";
// every key is optional and defaults to DefaultGeometry's value.
func ParseGeometry(s string) (Geometry, error) {
	g := DefaultGeometry()
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return g, fmt.Errorf("%q: want key=value: %w", kv, ErrGeometry)
		}
		switch k {
		case "op":
			f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
			if err != nil {
				return g, fmt.Errorf("op=%s: not a number: %w", v, ErrGeometry)
			}
			g.OP = f
		case "ru":
			n, err := backend.ParseSize(v)
			if err != nil {
				return g, fmt.Errorf("ru=%s: %v: %w", v, err, ErrGeometry)
			}
			g.RUSize = n
		case "handles":
			n, err := strconv.Atoi(v)
			if err != nil {
				return g, fmt.Errorf("handles=%s: not a number: %w", v, ErrGeometry)
			}
			g.Handles = n
		case "gc":
			g.GC = v
		case "isolation":
			g.Isolation = v
		default:
			return g, fmt.Errorf("unknown key %q (want op, ru, handles, gc, isolation): %w", k, ErrGeometry)
		}
	}
	return g, g.Validate()
}

// Validate checks the parts of g that do not depend on the drive's size.
func (g Geometry) Validate() error {
	switch {
	case math.IsNaN(g.OP) || g.OP < 1 || g.OP > 90:
		return fmt.Errorf("op=%v: want a percentage from 1 to 90: %w", g.OP, ErrGeometry)
	case g.RUSize < 4*PageSize || g.RUSize%PageSize != 0 || g.RUSize > 1<<30:
		return fmt.Errorf("ru=%d: want a multiple of 4K from 16K to 1G: %w", g.RUSize, ErrGeometry)
	case g.Handles < 1 || g.Handles > 128:
		return fmt.Errorf("handles=%d: want 1 to 128: %w", g.Handles, ErrGeometry)
	case g.GC != "greedy" && g.GC != "cb":
		return fmt.Errorf("gc=%s: want greedy or cb: %w", g.GC, ErrGeometry)
	case g.Isolation != "initial" && g.Isolation != "persistent":
		return fmt.Errorf("isolation=%s: want initial or persistent: %w", g.Isolation, ErrGeometry)
	}
	return nil
}

// gcReserve is how many free units host writes leave for garbage
// collection: GC starts when a handle needs a unit and no more than this
// many are free, and its own destinations draw on them.
const gcReserve = 2

// layout is the derived geometry of a drive with a given logical size.
type layout struct {
	lpages  uint32 // logical pages the host sees
	ppru    uint32 // pages per reclaim unit
	nru     uint32 // physical reclaim units
	writers int    // open units: one per handle, plus GC destinations
}

// newLayout sizes the physical drive behind logical bytes: physical pages =
// logical / (1 - op), rounded up to whole reclaim units.
func newLayout(g Geometry, logical int64) (layout, error) {
	if err := g.Validate(); err != nil {
		return layout{}, err
	}
	if logical <= 0 || logical%PageSize != 0 || logical/PageSize >= math.MaxUint32/2 {
		return layout{}, fmt.Errorf("logical size %d: want a positive multiple of 4K below 8 TiB: %w", logical, ErrGeometry)
	}
	l := layout{lpages: uint32(logical / PageSize), ppru: uint32(g.RUSize / PageSize)}
	phys := math.Ceil(float64(l.lpages) / (1 - g.OP/100))
	nru := math.Ceil(phys / float64(l.ppru))
	if nru*float64(l.ppru) >= math.MaxUint32-1 {
		return layout{}, fmt.Errorf("%d MiB logical: too many physical pages: %w", logical>>20, ErrGeometry)
	}
	l.nru = uint32(nru)
	l.writers = g.Handles + 1
	if g.Isolation == "persistent" {
		l.writers = 2 * g.Handles
	}
	// Each open unit can hold the only invalid pages, so GC can only
	// always find a victim when the spare units outnumber the open ones
	// plus the reserve (pigeonhole over the closed units).
	lru := (l.lpages + l.ppru - 1) / l.ppru
	spare := int(l.nru) - int(lru)
	if need := l.writers + gcReserve + 1; spare < need {
		return layout{}, fmt.Errorf("op=%v%% of %d MiB gives %d spare reclaim units of %s; %d handles with %s isolation need at least %d (use a smaller ru, fewer handles, a larger op or a larger image): %w",
			g.OP, logical>>20, spare, sizeString(g.RUSize), g.Handles, g.Isolation, need, ErrGeometry)
	}
	return l, nil
}

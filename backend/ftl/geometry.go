// Package ftl models the flash translation layer of an FDP SSD beside an
// image file: page-level mapping, reclaim units filled through reclaim unit
// handles, greedy or cost-benefit garbage collection in the background and
// on demand, and the counters a drive keeps (host bytes, media bytes, bytes
// erased). It does not move data: the image holds the host's bytes at their
// logical offsets, and the model only counts what a drive would have
// written, so that its write amplification can be read without owning the
// hardware. Traces (trace.go) record what a device was asked to do, and
// Replay plays them into a model of any drive.
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
	// GC is "greedy" (fewest valid pages) or "cost-benefit".
	GC string `json:"gc"`
	// Isolation is "initial" (GC may mix handles' data in one unit) or
	// "persistent" (GC keeps each handle's data in units of its own).
	Isolation string `json:"isolation"`
	// BG is the background GC trigger, in percent of all units: after
	// every command, while no more than this share is free, the drive
	// collects one victim, if it has at least BGInvalid percent invalid
	// pages (FEMU: 25 and 12.5). 0 switches background GC off; Auto puts
	// the trigger an eighth of the way from FG to what a full drive can
	// keep free: units held free are spare space lost to the host.
	BG        float64 `json:"bg_percent"`
	BGInvalid float64 `json:"bg_invalid_percent"`
	// FG is the foreground trigger, in percent of all units: before a
	// write command, while no more than this share is free, the drive
	// collects victims whatever their share (FEMU: 5). Auto is the GC
	// reserve of 2 units; 0 collects only when a handle needs a unit and
	// the reserve is reached. It is capped below what a full drive can
	// keep free, where it would collect without end.
	FG float64 `json:"fg_percent"`
	// Preopen gives every handle an open unit from the start and a new
	// one as soon as its unit fills, as drives (and FEMU) do; without it
	// units are opened at the first write that needs one.
	Preopen bool `json:"preopen"`
	// Precondition is what mkfs leaves on the drive: "none" (a fresh,
	// fully discarded drive), "seq" (every page written once, in order)
	// or "random" (seq, then one logical capacity of random 4 KiB
	// overwrites). The counters start at zero after it.
	Precondition string `json:"precondition"`
	// Meta is where the filesystem's metadata goes: "last" (the last
	// handle: its own while the streams in use are fewer than the
	// handles) or "shared" (the first handle, with unstreamed data and
	// stream 1, as NVMe drives get metadata without a directive).
	Meta string `json:"meta"`
}

// Auto marks a threshold the model derives from the drive's geometry.
const Auto = -1

// DefaultGeometry is what an --ftl option leaves unsaid: background GC, as
// drives collect, with pre-opened units.
func DefaultGeometry() Geometry {
	return Geometry{OP: 7, RUSize: 8 << 20, Handles: 8, GC: "greedy", Isolation: "initial",
		BG: Auto, BGInvalid: 12.5, FG: Auto, Preopen: true, Precondition: "none", Meta: "last"}
}

// legacyGeometry is what a label written before the GC timing keys meant:
// GC only when a handle needs a unit, units opened lazily.
func legacyGeometry() Geometry {
	g := DefaultGeometry()
	g.BG, g.FG, g.Preopen, g.Meta = 0, 0, false, "shared"
	return g
}

// SpecHelp describes the --ftl specification, for the help of mkfs.
const SpecHelp = `--ftl SPEC makes the image a modelled FDP SSD; SPEC is key=value,... (all optional):
  op=7            over-provisioning, percent of physical space (1-90)
  ru=8M           reclaim unit size (16K-1G)
  handles=8       reclaim unit handles = write streams (1-128)
  gc=greedy       victim choice: greedy (fewest valid pages) or cost-benefit
  isolation=initial
                  GC copies of all handles share units (initial) or not (persistent)
  bg=auto         background GC: after each command, while at most this percent
                  of units is free, collect one victim (0: off; auto: an eighth
                  of the way from fg to what a full drive can keep free)
  bg_invalid=12.5 background GC skips victims with less than this percent invalid
  fg=auto         foreground GC before a write while at most this percent of
                  units is free (auto: the 2-unit reserve)
  preopen=on      every handle holds an open unit from the start (on|off)
  precondition=none
                  none (fresh drive), seq (written once) or random (written
                  once, then overwritten at random once); counters start after it
  meta=last       filesystem metadata on the last handle (its own while fewer
                  streams are in use) or shared (with stream 1 and no stream)
FEMU's bbssd timing is bg=25,bg_invalid=12.5,fg=5,preopen=on.
`

// MountHelp describes the mount options that concern the model, for the
// help of mount.
const MountHelp = `  backend=ftl                 refuse an image without a drive model (modelled
                              images are recognised without it)
  ftl_trace=FILE              record every data and metadata write, discard and
                              flush, with its stream and handle, to FILE (any
                              backend); streamfs waf replay replays it
  stream_rules=PAT:ID;...     give new files a stream by name (first match wins)
  stream_rules_file=FILE      the same, one PATTERN:ID a line
`

// String renders g in the syntax ParseGeometry reads.
func (g Geometry) String() string {
	onOff := "off"
	if g.Preopen {
		onOff = "on"
	}
	return fmt.Sprintf("op=%s,ru=%s,handles=%d,gc=%s,isolation=%s,bg=%s,bg_invalid=%s,fg=%s,preopen=%s,precondition=%s,meta=%s",
		strconv.FormatFloat(g.OP, 'f', -1, 64), sizeString(g.RUSize), g.Handles, g.GC, g.Isolation,
		pctString(g.BG), pctString(g.BGInvalid), pctString(g.FG), onOff, g.Precondition, g.Meta)
}

func pctString(f float64) string {
	if f == Auto {
		return "auto"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
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

// ParseGeometry reads SpecHelp's key=value list; every key is optional and
// defaults to DefaultGeometry's value.
func ParseGeometry(s string) (Geometry, error) {
	return parseGeometry(s, DefaultGeometry())
}

func parseGeometry(s string, g Geometry) (Geometry, error) {
	pct := func(k, v string, auto bool) (float64, error) {
		if auto && v == "auto" {
			return Auto, nil
		}
		f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%s=%s: not a number: %w", k, v, ErrGeometry)
		}
		return f, nil
	}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return g, fmt.Errorf("%q: want key=value: %w", kv, ErrGeometry)
		}
		var err error
		switch k {
		case "op":
			g.OP, err = pct(k, v, false)
		case "ru":
			n, perr := backend.ParseSize(v)
			if perr != nil {
				return g, fmt.Errorf("ru=%s: %v: %w", v, perr, ErrGeometry)
			}
			g.RUSize = n
		case "handles":
			n, perr := strconv.Atoi(v)
			if perr != nil {
				return g, fmt.Errorf("handles=%s: not a number: %w", v, ErrGeometry)
			}
			g.Handles = n
		case "gc":
			if v == "cb" { // the first name, kept for older labels
				v = "cost-benefit"
			}
			g.GC = v
		case "isolation":
			g.Isolation = v
		case "bg":
			g.BG, err = pct(k, v, true)
		case "bg_invalid":
			g.BGInvalid, err = pct(k, v, false)
		case "fg":
			g.FG, err = pct(k, v, true)
		case "preopen":
			switch v {
			case "on":
				g.Preopen = true
			case "off":
				g.Preopen = false
			default:
				return g, fmt.Errorf("preopen=%s: want on or off: %w", v, ErrGeometry)
			}
		case "precondition":
			g.Precondition = v
		case "meta":
			g.Meta = v
		default:
			return g, fmt.Errorf("unknown key %q (want op, ru, handles, gc, isolation, bg, bg_invalid, fg, preopen, precondition, meta): %w", k, ErrGeometry)
		}
		if err != nil {
			return g, err
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
	case g.GC != "greedy" && g.GC != "cost-benefit":
		return fmt.Errorf("gc=%s: want greedy or cost-benefit: %w", g.GC, ErrGeometry)
	case g.Isolation != "initial" && g.Isolation != "persistent":
		return fmt.Errorf("isolation=%s: want initial or persistent: %w", g.Isolation, ErrGeometry)
	case g.BG != Auto && !(g.BG >= 0 && g.BG <= 90):
		return fmt.Errorf("bg=%v: want auto or a percentage from 0 to 90: %w", g.BG, ErrGeometry)
	case !(g.BGInvalid >= 0 && g.BGInvalid < 100):
		return fmt.Errorf("bg_invalid=%v: want a percentage from 0 to below 100: %w", g.BGInvalid, ErrGeometry)
	case g.FG != Auto && !(g.FG >= 0 && g.FG <= 50):
		return fmt.Errorf("fg=%v: want auto or a percentage from 0 to 50: %w", g.FG, ErrGeometry)
	case g.Precondition != "none" && g.Precondition != "seq" && g.Precondition != "random":
		return fmt.Errorf("precondition=%s: want none, seq or random: %w", g.Precondition, ErrGeometry)
	case g.Meta != "last" && g.Meta != "shared":
		return fmt.Errorf("meta=%s: want last or shared: %w", g.Meta, ErrGeometry)
	}
	return nil
}

// HandleFor maps a write stream to a 0-based handle as NVMe maps streams
// to placement identifiers: stream N to the N-th handle, no stream (and a
// stream beyond the handles) to the first; metadata per Meta.
func (g Geometry) HandleFor(stream uint32) int {
	if stream == backend.StreamMeta && g.Meta == "last" {
		return g.Handles - 1
	}
	return streamHandle(stream, g.Handles)
}

// gcReserve is how many free units host writes leave for garbage
// collection: GC starts when a handle needs a unit and no more than this
// many are free, and its own destinations draw on them.
const gcReserve = 2

// layout is the derived geometry of a drive with a given logical size.
type layout struct {
	lpages       uint32 // logical pages the host sees
	ppru         uint32 // pages per reclaim unit
	nru          uint32 // physical reclaim units
	writers      int    // open units: one per handle, plus GC destinations
	fgUnits      uint32 // foreground GC while free units <= this
	bgUnits      uint32 // background GC while free units <= this (0: off)
	bgMinInvalid uint32 // pages a background victim must have invalid
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
	// A full drive keeps at most spare - writers units free: a foreground
	// trigger at or above that would collect without end.
	keep := uint32(spare - l.writers)
	switch {
	case g.FG == Auto:
		l.fgUnits = gcReserve
	case g.FG > 0:
		l.fgUnits = max(gcReserve, min(uint32(g.FG/100*float64(l.nru)), keep-gcReserve-1))
	}
	switch {
	case g.BG == Auto:
		// Every unit held free is spare space the host cannot use, so the
		// default holds few: an eighth of what a full drive can keep.
		l.bgUnits = l.fgUnits + max(1, (keep-l.fgUnits)/8)
	case g.BG > 0:
		// Above what a full drive keeps free is allowed (FEMU does it):
		// background GC then never rests once the drive is full.
		l.bgUnits = max(l.fgUnits, uint32(g.BG/100*float64(l.nru)))
	}
	l.bgMinInvalid = uint32(math.Ceil(g.BGInvalid / 100 * float64(l.ppru)))
	return l, nil
}

package backend

import (
	"errors"
	"fmt"
)

// ZoneType is a zone's type, with the values of the NVMe ZNS zone
// descriptor (ZT) and of Linux's BLK_ZONE_TYPE_*.
type ZoneType uint8

const (
	// ZoneConventional is written anywhere, like an ordinary disk.
	ZoneConventional ZoneType = 1
	// ZoneSeqWriteRequired is written only at its write pointer.
	ZoneSeqWriteRequired ZoneType = 2
)

// ZoneCond is a zone's condition (state), with the values of the NVMe ZNS
// zone state field (ZS) and of Linux's BLK_ZONE_COND_*.
type ZoneCond uint8

const (
	ZoneNotWP        ZoneCond = 0x0 // conventional: no write pointer
	ZoneEmpty        ZoneCond = 0x1
	ZoneImplicitOpen ZoneCond = 0x2 // opened by a write
	ZoneExplicitOpen ZoneCond = 0x3 // opened by an Open command
	ZoneClosed       ZoneCond = 0x4 // written part-way, holds an active resource
	ZoneReadOnly     ZoneCond = 0xd
	ZoneFull         ZoneCond = 0xe
	ZoneOffline      ZoneCond = 0xf
)

func (c ZoneCond) String() string {
	switch c {
	case ZoneNotWP:
		return "conventional"
	case ZoneEmpty:
		return "empty"
	case ZoneImplicitOpen:
		return "implicit-open"
	case ZoneExplicitOpen:
		return "explicit-open"
	case ZoneClosed:
		return "closed"
	case ZoneReadOnly:
		return "read-only"
	case ZoneFull:
		return "full"
	case ZoneOffline:
		return "offline"
	}
	return fmt.Sprintf("cond-%#x", uint8(c))
}

// Open reports the open conditions, which count against the open limit.
func (c ZoneCond) Open() bool { return c == ZoneImplicitOpen || c == ZoneExplicitOpen }

// Active reports the conditions that count against the active limit.
func (c ZoneCond) Active() bool { return c.Open() || c == ZoneClosed }

// Zone is one zone as a zone report describes it. Offsets are bytes.
type Zone struct {
	Start int64    `json:"start"`
	Len   int64    `json:"len"` // zone size: the distance to the next zone
	Cap   int64    `json:"cap"` // writable bytes from Start (<= Len)
	WP    int64    `json:"wp"`  // write pointer; Start+Cap when full, Start for conventional
	Type  ZoneType `json:"type"`
	Cond  ZoneCond `json:"cond"`
}

// ZoneOp is a zone management action, with the values of the NVMe Zone
// Management Send ZSA field.
type ZoneOp uint8

const (
	ZoneOpClose  ZoneOp = 0x1
	ZoneOpFinish ZoneOp = 0x2
	ZoneOpOpen   ZoneOp = 0x3
	ZoneOpReset  ZoneOp = 0x4
)

func (o ZoneOp) String() string {
	switch o {
	case ZoneOpClose:
		return "close"
	case ZoneOpFinish:
		return "finish"
	case ZoneOpOpen:
		return "open"
	case ZoneOpReset:
		return "reset"
	}
	return fmt.Sprintf("zone-op-%#x", uint8(o))
}

// ZoneGeometry is the fixed shape of a zoned device. Conventional zones,
// when there are any, come first.
type ZoneGeometry struct {
	ZoneSize     int64 `json:"zone_size"`
	ZoneCap      int64 `json:"zone_cap"`
	Zones        int   `json:"zones"`
	Conventional int   `json:"conventional"`
	// MaxOpen and MaxActive bound the open and the active sequential
	// zones; 0 means no limit.
	MaxOpen   int `json:"max_open"`
	MaxActive int `json:"max_active"`
	// MaxAppend is the largest Zone Append in bytes (a ZNS drive's zone
	// append size limit, or its transfer limit); 0 means no limit below
	// the zone capacity.
	MaxAppend int64 `json:"max_append,omitempty"`
}

// Zoned is a Device cut into zones. Its WriteAt writes a conventional zone
// anywhere and a sequential zone only at the write pointer; reads below a
// write pointer return what was written, reads beyond it zeroes. Offsets
// naming a zone are its start. Writes to one sequential zone must be
// issued one after another by the caller (a second write sent before the
// first completed may reach the zone first and be refused); Append needs
// no order.
type Zoned interface {
	Device
	Geometry() ZoneGeometry
	// ReportZones describes up to max zones from the one holding off
	// (max <= 0: to the end).
	ReportZones(off int64, max int) ([]Zone, error)
	// ZoneMgmt runs a zone management action on the zone starting at off.
	ZoneMgmt(op ZoneOp, off int64) error
	// Append writes p at the write pointer of the zone starting at zone
	// and returns where it landed, as NVMe Zone Append does.
	Append(p []byte, zone int64, stream uint32) (int64, error)
}

// The errors of the zoned rules; each names the NVMe ZNS status a drive
// returns for it, and the NVMe backend maps those statuses onto them.
var (
	// ErrZoneInvalidWrite: a write not at the zone's write pointer, or not
	// whole sectors (Zone Invalid Write, 0xBC).
	ErrZoneInvalidWrite = errors.New("zoned: write not at the write pointer")
	// ErrZoneBoundary: a request crosses a zone boundary or the zone's
	// capacity (Zone Boundary Error, 0xB8).
	ErrZoneBoundary = errors.New("zoned: request crosses a zone boundary")
	// ErrZoneFull: a write to a full zone (Zone Is Full, 0xB9).
	ErrZoneFull = errors.New("zoned: zone is full")
	// ErrZoneReadOnly: a write to a read-only zone (Zone Is Read Only, 0xBA).
	ErrZoneReadOnly = errors.New("zoned: zone is read only")
	// ErrZoneOffline: any access to an offline zone (Zone Is Offline, 0xBB).
	ErrZoneOffline = errors.New("zoned: zone is offline")
	// ErrTooManyActive: the action needs an active zone beyond the limit
	// (Too Many Active Zones, 0xBD).
	ErrTooManyActive = errors.New("zoned: too many active zones")
	// ErrTooManyOpen: the action needs an open zone beyond the limit and no
	// implicitly opened zone can be closed for it (Too Many Open Zones, 0xBE).
	ErrTooManyOpen = errors.New("zoned: too many open zones")
	// ErrZoneState: the action is not allowed in the zone's condition, or
	// names no zone start (Invalid Zone State Transition, 0xBF).
	ErrZoneState = errors.New("zoned: invalid zone state transition")
	// ErrZoneConventional: a zone action or append on a conventional zone.
	ErrZoneConventional = errors.New("zoned: conventional zone has no write pointer")
)

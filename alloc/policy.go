package alloc

import (
	"fmt"
	"strings"
)

// AGShift is where an inode number's AG starts: inode numbers carry their
// AG in the high 32 bits (as XFS's do), so placement needs no inode lookup.
const AGShift = 32

// MakeIno builds an inode number from its AG and its number within the AG.
func MakeIno(ag uint32, agino uint32) uint64 {
	return uint64(ag)<<AGShift | uint64(agino)
}

// InoAG returns the AG an inode number belongs to.
func InoAG(ino uint64) uint32 { return uint32(ino >> AGShift) }

// InoAGino returns the inode's number within its AG.
func InoAGino(ino uint64) uint32 { return uint32(ino) }

// Policy selects how file data is spread over the allocation groups.
type Policy int

const (
	PolicyInode   Policy = iota // data in the inode's own AG (XFS default; baseline)
	PolicyAGSet                 // patch 4: generic AG set of min(2,nags), fan-out by agino
	PolicyStreams               // patches 4+5+6: stream files to their stream's AG set, others generic AG set (default)
)

var policyNames = [...]string{
	PolicyInode:   "inode",
	PolicyAGSet:   "agset",
	PolicyStreams: "streams",
}

// ParsePolicy parses "inode", "agset" or "streams" (case-insensitive).
func ParsePolicy(s string) (Policy, error) {
	for p, name := range policyNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown placement policy %q (want inode, agset or streams)", ErrInvalid, s)
}

func (p Policy) String() string {
	if p >= 0 && int(p) < len(policyNames) {
		return policyNames[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// genericSetSize is GENERIC_AG_SET_SZ of patch 4, capped by the AG count.
func genericSetSize(nags uint32) uint32 {
	return min(2, nags)
}

// GenericAGSet returns the target AG of the generic AG set (patch 4): the
// set is base..base+min(2,nags)-1 (mod nags) and agino fans files out
// inside it. It returns 0 when nags is 0.
func GenericAGSet(base, agino, nags uint32) uint32 {
	if nags == 0 {
		return 0
	}
	set := genericSetSize(nags)
	// 64-bit sum: base may be any uint32 and must not wrap before the mod.
	return uint32((uint64(base) + uint64(agino%set)) % uint64(nags))
}

// StreamAGSet returns the AG set of a write stream (patch 5). stream is
// 1-based; ids above nstreams wrap onto 1..nstreams. AGs are partitioned
// among the streams, the last stream taking the remainder; with fewer AGs
// than streams, streams share AGs round robin with a set of one AG. It
// returns (0, 0) for stream 0, nstreams 0 or nags 0: the caller then uses
// the generic AG set.
func StreamAGSet(stream, nstreams, nags uint32) (first, size uint32) {
	if stream == 0 || nstreams == 0 || nags == 0 {
		return 0, 0
	}
	if stream > nstreams {
		stream = (stream-1)%nstreams + 1
	}
	s := stream - 1 // 0-based math, ids are 1-based
	set := nags / nstreams
	if set == 0 {
		return s % nags, 1
	}
	first = s * set
	if stream == nstreams {
		// Uneven split: the last stream covers the extra AGs.
		set = nags - first
	}
	return first, set
}

// SoftwareStreams returns the AG set size and the stream count used when
// the device has no hardware streams (patch 6): sets of 4 AGs from 32 AGs
// up, 2 from 8, else 1, and at most 16 streams.
func SoftwareStreams(nags uint32) (setSize, streams uint32) {
	switch {
	case nags >= 32:
		setSize = 4
	case nags >= 8:
		setSize = 2
	default:
		setSize = 1
	}
	return setSize, min(nags/setSize, maxUserStreams)
}

// maxUserStreams is XFS_MAX_USER_WRITE_STREAMS.
const maxUserStreams = 16

// MaxStreams returns the number of write streams files may use: the
// backend's hardware streams, or software streams when it has none.
func (a *Allocator) MaxStreams() uint32 {
	return a.maxStreams
}

func maxStreams(hw, nags uint32) uint32 {
	if hw > 0 {
		return hw
	}
	_, n := SoftwareStreams(nags)
	return n
}

// AGSet returns the AG set (first AG, set size) the policy gives a file's
// data. Members are first..first+size-1 modulo the AG count; the target AG
// inside it is (first + agino%size) % nags.
func (a *Allocator) AGSet(ino uint64, stream uint32) (first, size uint32) {
	nags := a.geo.AGCount
	base := InoAG(ino) % nags
	switch a.opts.Policy {
	case PolicyInode:
		return base, 1
	case PolicyStreams:
		if stream != 0 {
			if f, sz := StreamAGSet(stream, a.maxStreams, nags); sz > 0 {
				return f, sz
			}
		}
	}
	return base, genericSetSize(nags)
}

// targetAG returns the AG the policy picks first for this inode.
func targetAG(first, size, agino, nags uint32) uint32 {
	return uint32((uint64(first) + uint64(agino%size)) % uint64(nags))
}

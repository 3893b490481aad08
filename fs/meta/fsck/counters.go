package fsck

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

// agCount is what fsck finds in one AG's tree, to hold the AG's counters
// against: the AG header (next inode number, inode count), the inode
// counts per stream and stream source, and (AG 0) the rotor.
type agCount struct {
	inodes   int64
	next     uint64              // above every agino in use (0: none)
	streams  map[StreamKey]int64 // inodes with a stream, counted
	stored   map[StreamKey]int64 // the stream counts the tree holds
	bad      []badKey            // malformed or unknown keys
	rotor    []byte
	hasRotor bool
}

// badKey is a key fsck does not accept, and why.
type badKey struct {
	k   []byte
	why string
}

// inode counts an inode record.
func (c *agCount) inode(a *format.InodeRec) {
	c.inodes++
	if a.Ino > rootIno {
		c.next = max(c.next, uint64(alloc.InoAGino(a.Ino))+1)
	}
	if a.Stream != 0 {
		if c.streams == nil {
			c.streams = map[StreamKey]int64{}
		}
		c.streams[StreamKey{a.Stream, a.StreamSrc}]++
	}
}

// agKey takes a key of the AG area (prefix 00) other than an orphan.
func (c *agCount) agKey(ag int, k, v []byte) {
	switch {
	case bytes.Equal(k, format.AGHeaderKey()):
		// Decoded by the load, which reports a bad one.
	case bytes.HasPrefix(k, format.StreamCountPrefix()):
		if len(k) != 7 || len(v) != 8 || le64(v) == 0 || le64(v) > math.MaxInt64 {
			c.bad = append(c.bad, badKey{bytes.Clone(k), "malformed stream count"})
			return
		}
		if c.stored == nil {
			c.stored = map[StreamKey]int64{}
		}
		c.stored[StreamKey{binary.BigEndian.Uint32(k[2:]), k[6]}] = int64(le64(v))
	case ag == 0 && bytes.Equal(k, format.RotorKey()):
		c.rotor, c.hasRotor = bytes.Clone(v), true
	default:
		c.unknownKey(k)
	}
}

// unknownKey records a key no part of the format defines.
func (c *agCount) unknownKey(k []byte) {
	c.bad = append(c.bad, badKey{bytes.Clone(k), "unknown key"})
}

// checkCounters holds every AG's counters (as loaded and brought forward
// by replay, which is what the next checkpoint writes) against what the
// trees hold. -y sets them to the counts, and the repaired checkpoint
// writes them; keys that are malformed or unknown are deleted.
func (f *fsck) checkCounters(counts []agCount) {
	img := f.img
	fixed := false
	for ag := range counts {
		c := &counts[ag]
		// A header the load could not decode is reported already: its
		// counters started from zero, so only the repair is left to do.
		quiet := slices.Contains(f.badHeader, ag)
		mismatch := func(msg string, a ...any) bool {
			if quiet {
				return f.repair
			}
			return f.problem(true, msg, a...)
		}
		if quiet && f.repair {
			fixed = true
		}
		inodes, mem := img.AGCounters(ag)
		if inodes != c.inodes && mismatch("AG %d header: %d inodes, the tree holds %d", ag, inodes, c.inodes) {
			img.SetAGInodes(ag, c.inodes)
			fixed = true
		}
		if next := img.NextAgino(ag); uint64(next) < c.next &&
			mismatch("AG %d header: next inode number %d, but number %d is in use", ag, next, c.next-1) {
			img.SetNextAgino(ag, uint32(min(c.next, math.MaxUint32)))
			fixed = true
		}
		// Every stream key the memory, the tree or the count knows.
		var keys []StreamKey
		for _, m := range []map[StreamKey]int64{mem, c.streams, c.stored} {
			for k := range m {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
		slices.SortFunc(keys, func(a, b StreamKey) int { return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Src, b.Src)) })
		streamsBad := false
		for _, k := range keys {
			have, ok := mem[k]
			if !ok {
				have = c.stored[k] // the load stopped before it
			}
			if have != c.streams[k] && mismatch("AG %d: %d inodes recorded for stream %d (source %d), the tree holds %d",
				ag, have, k.ID, k.Src, c.streams[k]) {
				streamsBad = true
			}
		}
		if streamsBad || (quiet && f.repair) {
			m := make(map[StreamKey]int64, len(keys))
			for _, k := range keys {
				m[k] = c.streams[k] // a zero deletes the key
			}
			img.SetAGStreams(ag, m)
			fixed = true
		}
		for _, b := range c.bad {
			if f.problem(true, "AG %d: %s % x: deleted", ag, b.why, b.k) {
				if _, err := img.Trees()[ag].Delete(b.k); err != nil {
					f.problem(false, "AG %d: deleting key % x: %v", ag, b.k, err)
					continue
				}
				fixed = true
			}
		}
	}
	// The rotor is kept in memory modulo the AG count; the checkpoint
	// writes it back.
	c := &counts[0]
	var bad string
	switch {
	case !c.hasRotor:
		bad = "missing"
	case len(c.rotor) != 4:
		bad = "malformed"
	case binary.LittleEndian.Uint32(c.rotor) >= img.Super().AGCount:
		bad = "beyond the last AG"
	}
	if bad != "" && f.problem(true, "directory rotor %s: reset to AG %d", bad, img.Rotor()) {
		fixed = true
	}
	if fixed {
		f.fixes++
	}
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

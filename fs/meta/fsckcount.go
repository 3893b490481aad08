package meta

import (
	"bytes"
	"cmp"
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
	streams  map[streamKey]int64 // inodes with a stream, counted
	stored   map[streamKey]int64 // the stream counts the tree holds
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
	if a.Ino > RootIno {
		c.next = max(c.next, uint64(alloc.InoAGino(a.Ino))+1)
	}
	if a.Stream != 0 {
		if c.streams == nil {
			c.streams = map[streamKey]int64{}
		}
		c.streams[streamKey{a.Stream, a.StreamSrc}]++
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
			c.stored = map[streamKey]int64{}
		}
		c.stored[streamKey{be32(k[2:]), k[6]}] = int64(le64(v))
	case ag == 0 && bytes.Equal(k, rotorKey):
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
	s := f.s
	fixed := false
	for ag := range counts {
		c := &counts[ag]
		st := &s.ags[ag]
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
		st.mu.Lock()
		inodes := st.inodes
		mem := make(map[streamKey]int64, len(st.streams))
		for k, n := range st.streams {
			mem[k] = n
		}
		st.mu.Unlock()
		if inodes != c.inodes && mismatch("AG %d header: %d inodes, the tree holds %d", ag, inodes, c.inodes) {
			st.mu.Lock()
			st.inodes, st.dirty = c.inodes, true
			st.mu.Unlock()
			fixed = true
		}
		if next := s.agNext[ag].Load(); uint64(next) < c.next &&
			mismatch("AG %d header: next inode number %d, but number %d is in use", ag, next, c.next-1) {
			s.agNext[ag].Store(uint32(min(c.next, math.MaxUint32)))
			fixed = true
		}
		// Every stream key the memory, the tree or the count knows.
		var keys []streamKey
		for _, m := range []map[streamKey]int64{mem, c.streams, c.stored} {
			for k := range m {
				if !slices.Contains(keys, k) {
					keys = append(keys, k)
				}
			}
		}
		slices.SortFunc(keys, func(a, b streamKey) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.src, b.src)) })
		streamsBad := false
		for _, k := range keys {
			have, ok := mem[k]
			if !ok {
				have = c.stored[k] // the load stopped before it
			}
			if have != c.streams[k] && mismatch("AG %d: %d inodes recorded for stream %d (source %d), the tree holds %d",
				ag, have, k.id, k.src, c.streams[k]) {
				streamsBad = true
			}
		}
		if streamsBad || (quiet && f.repair) {
			m := make(map[streamKey]int64, len(keys))
			for _, k := range keys {
				m[k] = c.streams[k] // a zero deletes the key
			}
			st.mu.Lock()
			st.streams, st.dirty = m, true
			st.mu.Unlock()
			fixed = true
		}
		for _, b := range c.bad {
			if f.problem(true, "AG %d: %s % x: deleted", ag, b.why, b.k) {
				if _, err := s.trees[ag].Delete(b.k); err != nil {
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
	case le32(c.rotor) >= s.sb.AGCount:
		bad = "beyond the last AG"
	}
	if bad != "" && f.problem(true, "directory rotor %s: reset to AG %d", bad, s.rotor.Load()) {
		fixed = true
	}
	if fixed {
		f.fixes++
	}
}

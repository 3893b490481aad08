package faulty

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/streamfs/streamfs/backend"
)

// Recorder is a backend.Device that passes every operation to its inner
// device and logs the writes, discards and flushes that succeeded, together
// with marks the caller drops between its own operations. A crash test runs
// a workload on a Recorder once, then builds every state a power cut could
// have left on the media (CrashStates, Replayer) and checks each one, as
// CrashMonkey and dm-log-writes do, instead of cutting at random points.
type Recorder struct {
	mu      sync.Mutex // guards ops and stopped; held across inner I/O so the log order is the issue order
	inner   backend.Device
	ops     []RecOp
	stopped bool
}

var _ backend.Device = (*Recorder)(nil)

// RecKind says what a logged operation was.
type RecKind uint8

const (
	RecWrite   RecKind = iota // a successful WriteAt
	RecDiscard                // a successful Discard
	RecFlush                  // a successful Flush: everything before it is durable
	RecMark                   // a caller's mark (Recorder.Mark); no I/O
)

// RecOp is one logged operation.
type RecOp struct {
	Kind RecKind
	Off  int64
	Data []byte // RecWrite: a copy of what was written
	Len  int64  // RecDiscard: bytes discarded
	Mark int    // RecMark: the caller's value
}

// End is where the operation's range ends (Off for flushes and marks).
func (o RecOp) End() int64 {
	switch o.Kind {
	case RecWrite:
		return o.Off + int64(len(o.Data))
	case RecDiscard:
		return o.Off + o.Len
	}
	return o.Off
}

// NewRecorder wraps inner.
func NewRecorder(inner backend.Device) *Recorder { return &Recorder{inner: inner} }

// Mark logs v at the current position. Marks cost no I/O; the caller
// gives them meaning (say "operation 3 returned").
func (r *Recorder) Mark(v int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.ops = append(r.ops, RecOp{Kind: RecMark, Mark: v})
	}
}

// Stop ends the recording: later operations still reach the inner device
// but are not logged (the teardown of a store whose crash states are
// already recorded).
func (r *Recorder) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
}

// Ops returns the log so far. The caller must not change the data.
func (r *Recorder) Ops() []RecOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func (r *Recorder) log(op RecOp) {
	if !r.stopped {
		r.ops = append(r.ops, op)
	}
}

// ReadAt implements backend.Device.
func (r *Recorder) ReadAt(p []byte, off int64) error { return r.inner.ReadAt(p, off) }

// WriteAt implements backend.Device. A failed write is not logged: the
// crash states model a device whose writes succeed (faulty.Device injects
// failures).
func (r *Recorder) WriteAt(p []byte, off int64, stream uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.inner.WriteAt(p, off, stream); err != nil {
		return err
	}
	r.log(RecOp{Kind: RecWrite, Off: off, Data: bytes.Clone(p)})
	return nil
}

// Discard implements backend.Device.
func (r *Recorder) Discard(off, length int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.inner.Discard(off, length); err != nil {
		return err
	}
	r.log(RecOp{Kind: RecDiscard, Off: off, Len: length})
	return nil
}

// Flush implements backend.Device.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.inner.Flush(); err != nil {
		return err
	}
	r.log(RecOp{Kind: RecFlush})
	return nil
}

// Size implements backend.Device.
func (r *Recorder) Size() int64 { return r.inner.Size() }

// SectorSize implements backend.Device.
func (r *Recorder) SectorSize() int { return r.inner.SectorSize() }

// MaxStreams implements backend.Device.
func (r *Recorder) MaxStreams() uint32 { return r.inner.MaxStreams() }

// Kind implements backend.Device.
func (r *Recorder) Kind() string { return r.inner.Kind() }

// MakeWritable implements backend.Reopener for the inner device.
func (r *Recorder) MakeWritable() error { return backend.MakeWritable(r.inner) }

// Close implements backend.Device; it closes the inner device.
func (r *Recorder) Close() error { return r.inner.Close() }

// Landing is one unflushed write or discard that reached the media before
// the power went.
type Landing struct {
	Op int // index in the log
	// Sectors, when not nil, are the only sectors (indices of the op's
	// tear units, counted from its start) that landed: a torn write. nil
	// means it landed whole.
	Sectors []int
}

// CrashState is one state the media may be in after a power cut: the log
// up to Durable (the last completed flush) landed, then Land, in that
// order, out of the unflushed operations in [Durable, At).
type CrashState struct {
	At      int // operations [0, At) were issued when the power went
	Durable int // operations [0, Durable) are durable (after the last flush before At)
	Land    []Landing
	Variant string // prefix, torn, drop, single, subset, reorder
}

func (c CrashState) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: cut before op %d, durable through op %d, landed [", c.Variant, c.At, c.Durable)
	for i, l := range c.Land {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%d", l.Op)
		if l.Sectors != nil {
			fmt.Fprintf(&sb, "(sectors %v)", l.Sectors)
		}
	}
	sb.WriteByte(']')
	return sb.String()
}

// EnumOptions bound CrashStates.
type EnumOptions struct {
	// TearUnit is the size of an atomic device write (a sector), in bytes.
	TearUnit int
	// MaxTears bounds the tear points tried per torn write (at least 2:
	// the first and the last unit boundary).
	MaxTears int
	// AllSubsets: an epoch of at most this many unflushed operations gets
	// every subset landed (in issue order, and reversed when some of them
	// overlap); larger epochs get Subsets random ones.
	AllSubsets int
	// Subsets is the number of random subsets (random order, each op torn
	// with probability 1/4) tried per epoch.
	Subsets int
	// Seed makes the random choices reproducible.
	Seed uint64
}

// CrashStates lists the crash states of a recorded log:
//   - prefix: before every write, discard and flush, and at the end,
//     everything issued so far landed in order (every prefix of the log);
//   - torn: the same with the newest write torn at unit granularity (a
//     prefix of its units, all but its first unit, or a random subset);
//   - at the end of every flush epoch (before each flush, and at the end of
//     the log), the reordered ones a volatile cache allows: each unflushed
//     op dropped (drop), each landed alone (single), and every subset or
//     random subsets in random order with random tears (subset, reorder).
//
// States are listed with Durable non-decreasing, which Replayer needs to
// build them cheaply.
func CrashStates(ops []RecOp, opt EnumOptions) []CrashState {
	if opt.TearUnit <= 0 {
		opt.TearUnit = 512
	}
	opt.MaxTears = max(opt.MaxTears, 2)
	rng := rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x6a09e667f3bcc908))
	var out []CrashState
	durable := 0
	var epoch []int // unflushed writes and discards, issue order
	whole := func(idx []int) []Landing {
		l := make([]Landing, len(idx))
		for i, o := range idx {
			l[i] = Landing{Op: o}
		}
		return l
	}
	endEpoch := func(at int) {
		if len(epoch) == 0 {
			return
		}
		out = append(out, reorderStates(ops, epoch, durable, at, opt, rng)...)
	}
	for at := 0; at <= len(ops); at++ {
		if at < len(ops) && (ops[at].Kind == RecMark) {
			continue
		}
		if at == len(ops) || ops[at].Kind == RecFlush {
			endEpoch(at)
		}
		// Before a flush too: the same image shows again after it, but
		// with the marks between the last write and the flush only.
		out = append(out, CrashState{At: at, Durable: durable, Land: whole(epoch), Variant: "prefix"})
		if n := len(epoch); n > 0 {
			last := epoch[n-1]
			for _, secs := range tearSets(ops[last], opt, rng) {
				l := whole(epoch[:n-1])
				l = append(l, Landing{Op: last, Sectors: secs})
				out = append(out, CrashState{At: at, Durable: durable, Land: l, Variant: "torn"})
			}
		}
		if at == len(ops) {
			break
		}
		if ops[at].Kind == RecFlush {
			durable, epoch = at+1, nil
		} else {
			epoch = append(epoch, at)
		}
	}
	return out
}

// units is the number of tear units op spans.
func units(op RecOp, unit int64) int {
	if op.End() == op.Off {
		return 0
	}
	return int((op.End()-1)/unit - op.Off/unit + 1)
}

// tearSets picks the unit subsets of op to land when it tears: proper,
// non-empty subsets only (none and all are the prefix states).
func tearSets(op RecOp, opt EnumOptions, rng *rand.Rand) [][]int {
	n := units(op, int64(opt.TearUnit))
	if n < 2 {
		return nil
	}
	seq := func(lo, hi int) []int {
		s := make([]int, 0, hi-lo)
		for i := lo; i < hi; i++ {
			s = append(s, i)
		}
		return s
	}
	var out [][]int
	seen := map[int]bool{}
	addPrefix := func(k int) {
		if k >= 1 && k < n && !seen[k] {
			seen[k] = true
			out = append(out, seq(0, k))
		}
	}
	if n-1 <= opt.MaxTears {
		for k := 1; k < n; k++ {
			addPrefix(k)
		}
	} else {
		addPrefix(1)
		addPrefix(n - 1)
		for i := 1; len(out) < opt.MaxTears-1 && i < opt.MaxTears; i++ {
			addPrefix(i * n / opt.MaxTears)
		}
		addPrefix(1 + rng.IntN(n-1))
	}
	// A device may program the units in any order: everything but the
	// first (a header that did not land over a body that did).
	out = append(out, seq(1, n))
	if n > 2 {
		var s []int
		for i := range n {
			if rng.IntN(2) == 0 {
				s = append(s, i)
			}
		}
		if len(s) > 0 && len(s) < n {
			out = append(out, s)
		}
	}
	return out
}

// reorderStates lists the states of one flush epoch (the unflushed ops in
// epoch, cut at at) whose landed ops are not a prefix.
func reorderStates(ops []RecOp, epoch []int, durable, at int, opt EnumOptions, rng *rand.Rand) []CrashState {
	n := len(epoch)
	var out []CrashState
	add := func(variant string, l []Landing) {
		out = append(out, CrashState{At: at, Durable: durable, Land: l, Variant: variant})
	}
	overlap := false
	for i := 0; i < n && !overlap; i++ {
		for j := i + 1; j < n; j++ {
			a, b := ops[epoch[i]], ops[epoch[j]]
			if a.Off < b.End() && b.Off < a.End() {
				overlap = true
				break
			}
		}
	}
	if n <= opt.AllSubsets {
		for mask := 1; mask < 1<<n-1; mask++ {
			var l []Landing
			for i := range n {
				if mask&(1<<i) != 0 {
					l = append(l, Landing{Op: epoch[i]})
				}
			}
			add("subset", l)
			if overlap && len(l) > 1 {
				r := slices.Clone(l)
				slices.Reverse(r)
				add("reorder", r)
			}
		}
		if overlap && n > 1 {
			var l []Landing
			for i := n - 1; i >= 0; i-- {
				l = append(l, Landing{Op: epoch[i]})
			}
			add("reorder", l)
		}
		return out
	}
	for skip := range n {
		var l []Landing
		for i, o := range epoch {
			if i != skip {
				l = append(l, Landing{Op: o})
			}
		}
		add("drop", l)
		add("single", []Landing{{Op: epoch[skip]}})
	}
	for range opt.Subsets {
		p := rng.Float64()
		var l []Landing
		for _, o := range epoch {
			if rng.Float64() < p {
				lg := Landing{Op: o}
				if rng.IntN(4) == 0 {
					if ts := tearSets(ops[o], opt, rng); len(ts) > 0 {
						lg.Sectors = ts[rng.IntN(len(ts))]
					}
				}
				l = append(l, lg)
			}
		}
		rng.Shuffle(len(l), func(i, j int) { l[i], l[j] = l[j], l[i] })
		add("reorder", l)
	}
	return out
}

// Replayer builds crash images from a recorded log and the image the
// recording started from.
type Replayer struct {
	ops  []RecOp
	base *Mem
	cur  *Mem // base with ops [0, at) applied
	at   int
	unit int64
}

// NewReplayer returns a Replayer for ops recorded over a device that held
// base when the recording began. It keeps its own copy of base. unit is
// the tear unit of the states it will build (as in EnumOptions).
func NewReplayer(base *Mem, ops []RecOp, unit int) *Replayer {
	if unit <= 0 {
		unit = 512
	}
	return &Replayer{ops: ops, base: base.Clone(), cur: base.Clone(), unit: int64(unit)}
}

// Image returns a new Mem holding crash state c. It is cheapest when
// called with non-decreasing c.Durable, as CrashStates lists them.
func (r *Replayer) Image(c CrashState) (*Mem, error) {
	if c.Durable < r.at {
		r.cur, r.at = r.base.Clone(), 0
	}
	for ; r.at < c.Durable; r.at++ {
		if err := apply(r.cur, r.ops[r.at], nil, r.unit); err != nil {
			return nil, fmt.Errorf("replay op %d: %w", r.at, err)
		}
	}
	m := r.cur.Clone()
	for _, l := range c.Land {
		if l.Op < c.Durable || l.Op >= c.At {
			return nil, fmt.Errorf("crash state %v: op %d is not unflushed", c, l.Op)
		}
		if err := apply(m, r.ops[l.Op], l.Sectors, r.unit); err != nil {
			return nil, fmt.Errorf("land op %d: %w", l.Op, err)
		}
	}
	return m, nil
}

// apply lands op on m: whole, or only the given tear units.
func apply(m *Mem, op RecOp, sectors []int, unit int64) error {
	switch op.Kind {
	case RecWrite:
		if sectors == nil {
			return m.WriteAt(op.Data, op.Off, 0)
		}
		for _, s := range sectors {
			lo := max((op.Off/unit+int64(s))*unit, op.Off)
			hi := min(lo/unit*unit+unit, op.End())
			if lo >= hi {
				continue
			}
			if err := m.WriteAt(op.Data[lo-op.Off:hi-op.Off], lo, 0); err != nil {
				return err
			}
		}
		return nil
	case RecDiscard:
		// A discarded range reads as anything; zeros are what Mem gives.
		if sectors == nil {
			return m.Discard(op.Off, op.Len)
		}
		for _, s := range sectors {
			lo := max((op.Off/unit+int64(s))*unit, op.Off)
			hi := min(lo/unit*unit+unit, op.End())
			if lo < hi {
				if err := m.Discard(lo, hi-lo); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return nil
}

// digestSeed makes Digest values comparable within one process.
var digestSeed = maphash.MakeSeed()

// Digest is a hash of the contents of m: equal contents give equal
// digests whatever the chunks that hold zeros, so a test can skip crash
// states it has already checked. Digests are comparable within one
// process only.
func (m *Mem) Digest() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var h maphash.Hash
	h.SetSeed(digestSeed)
	var kb [8]byte
	for _, k := range slices.Sorted(maps.Keys(m.chunks)) {
		c := m.chunks[k]
		if isZero(c) {
			continue
		}
		for i := range kb {
			kb[i] = byte(k >> (8 * i))
		}
		h.Write(kb[:])
		h.Write(c)
	}
	return h.Sum64()
}

package ftl

import (
	"errors"
	"fmt"
	"io"
)

// ReplayOptions change how a trace is played into a model.
type ReplayOptions struct {
	// NoDiscard drops every discard: the drive as if mounted without
	// online discard and never trimmed.
	NoDiscard bool
	// TrimEvery, when positive, holds discards back and tells the drive
	// of them in one batch every TrimEvery bytes of host writes, as a
	// periodic fstrim does; a range written again before the batch is
	// not trimmed.
	TrimEvery int64
	// Map sends a stream (backend.StreamMeta: the metadata) to a 0-based
	// handle instead of Geometry.HandleFor's rule.
	Map map[uint32]int
	// Interval, when positive, adds a row to Intervals every Interval
	// bytes of host writes.
	Interval int64
}

// IntervalStat is the WAF of one stretch of a replay.
type IntervalStat struct {
	HostEnd uint64    `json:"host_bytes_end"` // host bytes at the end of the stretch
	Host    uint64    `json:"host_bytes"`
	Media   uint64    `json:"media_bytes"`
	WAF     float64   `json:"waf"`
	Handles []float64 `json:"handle_waf"` // 0 for a handle without writes in it
}

// HandleResult is one handle's share of a replay.
type HandleResult struct {
	Handle int     `json:"handle"` // 1-based, as stats shows it
	Host   uint64  `json:"host_bytes_written"`
	Media  uint64  `json:"media_bytes_written"`
	WAF    float64 `json:"waf"`
}

// ReplayResult is what a replay measured.
type ReplayResult struct {
	Spec      string         `json:"ftl"`
	Logical   int64          `json:"logical_bytes"`
	Records   int64          `json:"records"`
	Host      uint64         `json:"host_bytes_written"`
	Media     uint64         `json:"media_bytes_written"`
	Erased    uint64         `json:"media_bytes_erased"`
	WAF       float64        `json:"waf"`
	Handles   []HandleResult `json:"handles"`
	Intervals []IntervalStat `json:"intervals,omitempty"`
	// Counters are the model's final counters, for callers that compare
	// them with a live run's.
	Counters Counters `json:"-"`
	model    *Model
}

// Replay plays the trace into a fresh model of geometry g whose logical
// size is the traced device's. g's precondition is applied where the trace
// says mkfs preconditioned the drive (with the seed it used), or before the
// first record when it never says so.
func Replay(tr *TraceReader, g Geometry, o ReplayOptions) (ReplayResult, error) {
	logical := tr.Header.Size / PageSize * PageSize
	m, err := NewModel(g, logical)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("replay: %w", err)
	}
	res := ReplayResult{Spec: g.String(), Logical: logical}
	var pending []uint64 // pages discarded since the last batched trim
	if o.TrimEvery > 0 {
		pending = make([]uint64, (m.l.lpages+63)/64)
	}
	var nextTrim, nextRow uint64 = uint64(o.TrimEvery), uint64(o.Interval)
	if !tr.Preconditioned {
		if err := m.Precondition(g.Precondition, 0); err != nil {
			return res, fmt.Errorf("replay: %w", err)
		}
	}
	prev := m.Counters()
	for {
		r, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("replay: %w", err)
		}
		res.Records++
		switch r.Op {
		case OpWrite:
			h := g.HandleFor(r.Stream)
			if mh, ok := o.Map[r.Stream]; ok {
				h = mh
			}
			if pending != nil {
				if first, last, ok := m.pages(r.Off, r.Len); ok {
					for p := first; p <= last; p++ {
						pending[p/64] &^= 1 << (p % 64)
					}
				}
			}
			if err := m.Write(r.Off, r.Len, h); err != nil {
				return res, fmt.Errorf("replay: record %d: %w", res.Records, err)
			}
		case OpDiscard:
			switch {
			case o.NoDiscard:
			case pending != nil:
				if r.Len > 0 && r.Off+r.Len <= logical {
					for p := (r.Off + PageSize - 1) / PageSize; p < (r.Off+r.Len)/PageSize; p++ {
						pending[p/64] |= 1 << (p % 64)
					}
				}
			default:
				m.Discard(r.Off, r.Len)
			}
		case OpSave:
			m.mu.Lock()
			m.canonical()
			m.mu.Unlock()
		case OpPrecondition:
			// The drive being modelled decides how it was
			// preconditioned; the trace only says when.
			if err := m.Precondition(g.Precondition, uint64(r.Off)); err != nil {
				return res, fmt.Errorf("replay: %w", err)
			}
			if g.Precondition != "none" {
				clear(pending) // every page was written since
			}
			prev = m.Counters()
		}
		c := m.Counters()
		if pending != nil && c.Host >= nextTrim {
			trimPending(m, pending)
			nextTrim = c.Host + uint64(o.TrimEvery)
		}
		if o.Interval > 0 && c.Host >= nextRow {
			res.Intervals = append(res.Intervals, interval(prev, c))
			prev = c
			nextRow = c.Host + uint64(o.Interval)
		}
	}
	c := m.Counters()
	if o.Interval > 0 && c.Host > prev.Host {
		res.Intervals = append(res.Intervals, interval(prev, c))
	}
	if err := m.Err(); err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	res.Counters, res.model = c, m
	res.Host, res.Media, res.Erased, res.WAF = c.Host, c.Media, c.Erased, WAF(c.Host, c.Media)
	for i, h := range c.Handles {
		res.Handles = append(res.Handles, HandleResult{Handle: i + 1, Host: h.Host, Media: h.Media, WAF: WAF(h.Host, h.Media)})
	}
	return res, nil
}

func interval(a, b Counters) IntervalStat {
	s := IntervalStat{HostEnd: b.Host, Host: b.Host - a.Host, Media: b.Media - a.Media, WAF: WAF(b.Host-a.Host, b.Media-a.Media)}
	for i := range b.Handles {
		s.Handles = append(s.Handles, WAF(b.Handles[i].Host-a.Handles[i].Host, b.Handles[i].Media-a.Handles[i].Media))
	}
	return s
}

// trimPending discards every run of pending pages and clears them.
func trimPending(m *Model, pending []uint64) {
	run := int64(-1)
	for p := int64(0); p <= int64(m.l.lpages); p++ {
		set := p < int64(m.l.lpages) && pending[p/64]&(1<<(p%64)) != 0
		switch {
		case set && run < 0:
			run = p
		case !set && run >= 0:
			m.Discard(run*PageSize, (p-run)*PageSize)
			run = -1
		}
	}
	clear(pending)
}

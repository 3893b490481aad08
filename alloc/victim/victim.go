// Package victim chooses what a log-structured cleaner collects: the FDP
// drive model's garbage collector (reclaim units) and the zone allocator's
// reclaim (zones) pick their victims with the same two rules.
package victim

import (
	"fmt"
	"strings"
)

// Policy is a victim choice rule.
type Policy int

const (
	// Greedy takes the unit with the fewest live blocks: the most space
	// for the least copying now.
	Greedy Policy = iota
	// CostBenefit (Rosenblum & Ousterhout's LFS cleaner) weighs the space
	// gained against the copy cost and the age of the data: old, cold
	// units are worth collecting at a higher live fraction, since their
	// data is unlikely to die soon on its own.
	CostBenefit
)

var names = [...]string{Greedy: "greedy", CostBenefit: "cost-benefit"}

// Parse parses "greedy" or "cost-benefit".
func Parse(s string) (Policy, error) {
	for p, n := range names {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("victim: unknown policy %q (want greedy or cost-benefit)", s)
}

func (p Policy) String() string {
	if p >= 0 && int(p) < len(names) {
		return names[p]
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Score is the cost-benefit score age·(1−u)/(2u) of a unit holding live of
// its capacity blocks (u = live/capacity), age being how long ago it was
// filled in any monotonic unit (callers add 1 so that a unit filled just
// now still scores). A unit with no live block gains everything for no
// copy: it scores +Inf and wins outright. capacity 0 scores 0.
func Score(age, live, capacity uint64) float64 {
	if capacity == 0 {
		return 0
	}
	if live == 0 {
		return inf
	}
	u := float64(live) / float64(capacity)
	return float64(age) * (1 - u) / (2 * u)
}

var inf = func() float64 { x := 0.0; return 1 / x }()

// Candidate is one unit a cleaner may collect.
type Candidate struct {
	ID       int
	Live     uint64 // live blocks it holds
	Capacity uint64 // blocks it holds when full
	Age      uint64 // time since it filled, +1
}

// Pick returns the index in cs of the victim under policy p, or -1 when cs
// is empty. Ties go to the first candidate, so the choice is deterministic
// for a given order.
func Pick(p Policy, cs []Candidate) int {
	best := -1
	switch p {
	case CostBenefit:
		bestScore := -1.0
		for i, c := range cs {
			if s := Score(c.Age, c.Live, c.Capacity); s > bestScore {
				best, bestScore = i, s
			}
		}
	default:
		for i, c := range cs {
			if best < 0 || c.Live < cs[best].Live {
				best = i
			}
		}
	}
	return best
}

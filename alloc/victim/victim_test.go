package victim

import (
	"math"
	"testing"
)

func TestScore(t *testing.T) {
	if s := Score(5, 0, 10); !math.IsInf(s, 1) {
		t.Errorf("empty unit scores %v, want +Inf", s)
	}
	if s := Score(5, 3, 0); s != 0 {
		t.Errorf("no capacity scores %v", s)
	}
	// u = 0.5: age·0.5/1 = age/2.
	if s := Score(8, 5, 10); s != 4 {
		t.Errorf("Score(8, 5, 10) = %v, want 4", s)
	}
	if Score(10, 6, 10) <= Score(1, 3, 10) {
		t.Error("an old unit 60% live should beat a new one 30% live")
	}
}

func TestPick(t *testing.T) {
	cs := []Candidate{
		{ID: 1, Live: 6, Capacity: 10, Age: 12},
		{ID: 2, Live: 3, Capacity: 10, Age: 1},
		{ID: 3, Live: 3, Capacity: 10, Age: 1},
	}
	if i := Pick(Greedy, cs); cs[i].ID != 2 {
		t.Errorf("greedy picked %d, want 2 (fewest live, first of a tie)", cs[i].ID)
	}
	if i := Pick(CostBenefit, cs); cs[i].ID != 1 {
		t.Errorf("cost-benefit picked %d, want 1 (old and cold)", cs[i].ID)
	}
	if Pick(Greedy, nil) != -1 || Pick(CostBenefit, nil) != -1 {
		t.Error("empty candidates gave a victim")
	}
	for _, p := range []Policy{Greedy, CostBenefit} {
		q, err := Parse(p.String())
		if err != nil || q != p {
			t.Errorf("Parse(%q) = %v, %v", p, q, err)
		}
	}
	if _, err := Parse("lru"); err == nil {
		t.Error("Parse accepted lru")
	}
}

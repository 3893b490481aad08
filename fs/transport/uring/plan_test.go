package uring

import "testing"

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"0-1\n", 2, true}, {"0", 1, true}, {"0-3,8,10-11", 7, true}, {"0-239", 240, true}, {"3-1", 0, false}, {"x", 0, false}, {"", 0, false}} {
		got, err := parseCPUList(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseCPUList(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

// The rings' buffers stay within MemoryBudget for any CPU count up to
// MemoryBudget/MinPayload, and never fall below one entry per queue or a
// payload the kernel would refuse.
func TestPlanBounded(t *testing.T) {
	for _, cpus := range []int{1, 2, 4, 8, 16, 64, 100, 240, 256, 512, 1024, 4096, 8192} {
		for _, mw := range []int{128 << 10, 1 << 20} {
			p := NewPlan(cpus, mw)
			if p.Queues != cpus || p.Depth < 1 || p.Depth > MaxDepth || p.Payload < MinPayload || p.Payload > max(mw, MinPayload) {
				t.Errorf("NewPlan(%d, %d) = %+v", cpus, mw, p)
			}
			if p.Payload%4096 != 0 {
				t.Errorf("NewPlan(%d, %d): payload %d not whole pages", cpus, mw, p.Payload)
			}
			limit := MemoryBudget + cpus*MaxDepth*headerSize
			if cpus > MemoryBudget/MinPayload {
				limit = cpus * (MinPayload + headerSize)
			}
			if p.Bytes() > limit {
				t.Errorf("NewPlan(%d, %d) = %v pins %d MiB, over %d MiB", cpus, mw, p, p.Bytes()>>20, limit>>20)
			}
		}
	}
	// The machine this runs on in CI: a full queue of 1 MiB entries.
	if p := NewPlan(2, 1<<20); p.Depth != MaxDepth || p.Payload != 1<<20 {
		t.Errorf("NewPlan(2, 1 MiB) = %+v, want %d entries of 1 MiB", p, MaxDepth)
	}
}

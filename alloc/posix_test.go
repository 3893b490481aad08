package alloc

import (
	"testing"
)

// Stream ids above the device's count wrap onto its streams, never past it.
func TestDeviceStream(t *testing.T) {
	for _, c := range []struct{ id, max, want uint32 }{
		{0, 4, 0}, {1, 4, 1}, {4, 4, 4}, {5, 4, 1}, {8, 4, 4}, {9, 4, 1},
		{7, 2, 1}, {6, 2, 2}, {3, 1, 1}, {5, 0, 5}, {^uint32(0), 3, (^uint32(0)-1)%3 + 1},
	} {
		if got := DeviceStream(c.id, c.max); got != c.want {
			t.Errorf("DeviceStream(%d, %d) = %d, want %d", c.id, c.max, got, c.want)
		}
		if c.max > 0 && DeviceStream(c.id, c.max) > c.max {
			t.Errorf("DeviceStream(%d, %d) above the device's streams", c.id, c.max)
		}
	}
}

package meta

// Crash tests of the zoned layout: the power-loss rounds of
// powerloss_test.go on a small zoned image, and power cuts at every device
// operation of one reclaim pass.

import (
	"errors"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/backend/zoned"
)

// keepOpen is a device whose Close leaves the media open: a zoned device
// loaded over a test's cut device must not close it, the test mounts it
// again after the crash.
type keepOpen struct{ backend.Device }

func (keepOpen) Close() error { return nil }

// overZoned loads the zoned device an image on dev holds.
func overZoned(dev backend.Device, ro bool) (backend.Device, error) {
	d, ok, err := zoned.Load(keepOpen{dev}, ro)
	if err == nil && !ok {
		err = errors.New("no zoned label on the image")
	}
	return d, err
}

// newZonedFaulty makes a zoned image of seq sequential zones (zonedGeo)
// with a streamfs on it and returns its media through a faulty device.
func newZonedFaulty(t testing.TB, seq int, seed int64) *faulty.Device {
	t.Helper()
	path := newZonedImage(t, seq)
	inner, err := backend.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(inner, seed)
	t.Cleanup(func() { fd.Revive(); fd.Close() })
	return fd
}

// TestPowerLossZoned runs the power-loss rounds on a zoned image so small
// (8 sequential zones of 6 MiB) that reclaim runs: every mount finishes
// the zones left part-written, so a few rounds fill the device with
// garbage. Cuts land in writes, commits, reclaim copies and resets alike.
func TestPowerLossZoned(t *testing.T) {
	seed := envInt(t, "STREAMFS_POWERLOSS_SEED", time.Now().UnixNano())
	fd := newZonedFaulty(t, 8, seed)
	runPowerLoss(t, seed, fd, plTarget{zoned: true, over: overZoned})
}

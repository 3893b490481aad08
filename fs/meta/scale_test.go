package meta

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TestScaleCreates creates STREAMFS_SCALE_FILES empty files (default: skip)
// in a few directories and reports creates/s, checkpoint pauses, the time
// to unmount and to mount again.
func TestScaleCreates(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("STREAMFS_SCALE_FILES"))
	if n == 0 {
		t.Skip("set STREAMFS_SCALE_FILES")
	}
	fd, _ := newTestImage(t, 64<<30, 1)
	o := testOpts()
	o.CommitInterval = 5 * time.Second
	o.Logger = zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel))
	s, err := Open(fd, o)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []*Inode
	for i := 0; i < 4; i++ {
		d, err := s.Create(s.Root(), fmt.Sprintf("d%d", i), NewInode{Mode: syscall.S_IFDIR | 0o755})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := s.Create(dirs[i%4], fmt.Sprintf("file-%09d", i), NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	c := s.Counters()
	t.Logf("%d creates in %v (%.0f/s); %d checkpoints, longest pause %d us, total %d us",
		n, el, float64(n)/el.Seconds(), c.Checkpoints, c.CheckpointPauseMax, c.CheckpointPauseTotal)
	start = time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("close %v", time.Since(start))
	start = time.Now()
	s, err = Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mount %v", time.Since(start))
	s.Close()
}

package fs

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// go-fuse's own lines reach the daemon's log at debug level, not stderr.
func TestFuseLoggerThroughZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := &FS{Log: zap.New(core)}
	l := f.fuseLogger()
	if l == nil {
		t.Fatal("no logger for go-fuse: its lines go raw to stderr")
	}
	l.Println("trySplice: splice: want 1052688 bytes, max pipe size 1048576")
	got := logs.All()
	if len(got) != 1 || got[0].Level != zapcore.DebugLevel || got[0].Message != "trySplice: splice: want 1052688 bytes, max pipe size 1048576" {
		t.Fatalf("logged %+v", got)
	}
}

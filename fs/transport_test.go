package fs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/streamfs/streamfs/fs/transport/uring"
)

// setUringParam sets the kernel's enable_uring for the test and restores
// it after; it skips where the kernel has no FUSE over io_uring.
func setUringParam(t *testing.T, v string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root")
	}
	old, err := os.ReadFile(uring.EnableParam)
	if err != nil {
		t.Skipf("no FUSE over io_uring in this kernel: %v", err)
	}
	if err := os.WriteFile(uring.EnableParam, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(uring.EnableParam, bytes.TrimSpace(old), 0o644); err != nil {
			t.Errorf("restoring %s: %v", uring.EnableParam, err)
		}
	})
}

// transportFds lists the process's fds on /dev/fuse and io_uring instances.
func transportFds(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var r []string
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if l == "/dev/fuse" || strings.Contains(l, "io_uring") {
			r = append(r, e.Name()+" -> "+l)
		}
	}
	return r
}

// With uring=on and the kernel's switch off, the mount fails before
// mounting, with one line that says how to switch it on; auto falls back
// to classic.
func TestUringOnNeedsKernelSwitch(t *testing.T) {
	setUringParam(t, "N")
	tr, err := (&FS{}).uringSetup(UringOn, &fuse.MountOptions{MaxWrite: 1 << 20})
	if err == nil || tr != nil {
		t.Fatalf("uring=on with enable_uring=N: %v, %v", tr, err)
	}
	if msg := err.Error(); !strings.Contains(msg, uring.EnableParam+"=Y") || strings.Contains(msg, "\n") {
		t.Fatalf("error %q: want one line naming %s=Y", msg, uring.EnableParam)
	}
	mo := fuse.MountOptions{MaxWrite: 1 << 20}
	if tr, err := (&FS{}).uringSetup(UringAuto, &mo); tr != nil || err != nil || mo.ExtraCapabilities&fuse.CAP_OVER_IO_URING != 0 {
		t.Fatalf("uring=auto with enable_uring=N: %v, %v, flags %#x", tr, err, mo.ExtraCapabilities)
	}
}

// Over io_uring, files written and read with coreutils and Go come back
// intact, the requests go through the rings, stats names the transport,
// and unmount leaves no /dev/fuse or io_uring fd behind.
func TestUringTransport(t *testing.T) {
	setUringParam(t, "Y")
	before := transportFds(t)
	mnt, _, _, srv := mountFaultyWith(t, 256<<20, MountOptions{Uring: UringOn})
	if tr := srv.Transport(); !strings.HasPrefix(tr, "io_uring") {
		t.Fatalf("transport %q with uring=on", tr)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10>>4) // 300 KiB: several requests per syscall at small payloads
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", src, filepath.Join(mnt, "a")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if out, err := exec.Command("dd", "if="+src, "of="+filepath.Join(mnt, "b"), "bs=4k", "oflag=direct", "status=none").CombinedOutput(); err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	for _, n := range []string{"a", "b"} {
		got, err := exec.Command("cat", filepath.Join(mnt, n)).Output()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("cat %s: %d bytes, err %v; want the %d written", n, len(got), err, len(data))
		}
	}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "d", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "a")); !os.IsNotExist(err) {
		t.Fatalf("stat of a renamed file: %v, want ENOENT (errors come back over the rings)", err)
	}
	if n := srv.ring.Requests(); n < 10 {
		t.Fatalf("%d requests through the rings", n)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	if after := transportFds(t); len(after) != len(before) {
		t.Fatalf("transport fds before mount %v, after unmount %v", before, after)
	}
}

// Both transports mount with the daemon's own /dev/fuse fd, so go-fuse
// never opens its poll-probe file on the new mount: a SIGKILL during that
// open left the daemon waiting on itself. go-fuse's request trace (-o
// debug) shows every request, the probe's LOOKUP included.
//
// The server also adds a P per /dev/fuse reader while it runs (addProcs),
// and gives them back when it ends.
func TestMountWithoutPollProbe(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	procs := runtime.GOMAXPROCS(0)
	mnt, _, _, srv := mountFaultyLog(t, 64<<20, MountOptions{Uring: UringOff, Debug: true}, zap.New(core))
	if tr := srv.Transport(); tr != "classic" {
		t.Fatalf("transport %q with uring=off", tr)
	}
	if got, want := runtime.GOMAXPROCS(0), procs+fuseReadersFor(procs); got != want {
		t.Errorf("GOMAXPROCS %d while mounted, want %d (%d and a P per reader)", got, want, procs)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after unmount, want %d back", got, procs)
	}
	var lookups int
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "LOOKUP") {
			lookups++
		}
		if strings.Contains(e.Message, ".go-fuse-epoll-hack") {
			t.Fatalf("go-fuse probed the new mount: %s", e.Message)
		}
	}
	if lookups == 0 {
		t.Fatalf("no LOOKUP in the request trace (%d entries): the trace does not show requests", logs.Len())
	}
}

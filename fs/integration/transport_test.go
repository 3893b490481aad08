package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamfs/streamfs/fs/transport/uring"
)

// STREAMFS_TEST_URING=on runs every mount of the suite with -o uring=on
// (scripts/test.sh runs the suite once per transport); a test that names
// its own uring= option keeps it.
func withTransport(opts []string) []string {
	v := os.Getenv("STREAMFS_TEST_URING")
	if v == "" {
		return opts
	}
	for _, o := range opts {
		if strings.HasPrefix(o, "uring=") || strings.Contains(o, ",uring=") {
			return opts
		}
	}
	return append(append([]string(nil), opts...), "uring="+v)
}

// uringSkipReason is why the io_uring run cannot happen here: the kernel
// has no FUSE over io_uring or it is switched off.
func uringSkipReason() string {
	if os.Getenv("STREAMFS_TEST_URING") != "on" {
		return ""
	}
	if why := uring.KernelSupport(); why != "" {
		return "the io_uring run of the integration tests: " + why
	}
	return ""
}

// stats names the transport the suite runs over; with the kernel's switch
// off, -o uring=on refuses to mount with one line that says how to switch
// it on.
func TestTransportChoice(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	want := "transport: classic"
	if os.Getenv("STREAMFS_TEST_URING") == "on" {
		want = "transport: io_uring ("
	}
	if out := streamfs(t, "stats", m.dir); !strings.Contains(out, want) {
		t.Fatalf("stats over STREAMFS_TEST_URING=%q says:\n%s\nwant %q", os.Getenv("STREAMFS_TEST_URING"), out, want)
	}
	m.unmount(t)

	if uring.KernelSupport() == "" || os.Getenv("STREAMFS_TEST_URING") == "on" {
		return // the kernel offers io_uring here: nothing to refuse
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := tryCmd(streamfsBin, "mount", "-o", "uring=on", img, dir)
	if err == nil || isMounted(dir) {
		t.Fatalf("mounted with uring=on and the kernel's switch off: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(l, "uring") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], uring.EnableParam+"=Y") {
		t.Fatalf("uring=on without the kernel's switch said:\n%s\nwant one line naming %s=Y", out, uring.EnableParam)
	}
}

package integration

import (
	"os"
	"strings"

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

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/ioctl"
)

func runStream(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	rc := Stream(args, &out, &errOut)
	return rc, out.String(), errOut.String()
}

func TestStreamUsageErrors(t *testing.T) {
	cases := [][]string{
		{},
		{"bogus", "/"},
		{"max"},
		{"get"},
		{"set"},
		{"set", "/"},
		{"max", "/", "extra"},
		{"get", "/", "1"},
		{"set", "/", "1", "2"},
		{"set", "", "1"},
		// Ids that atoi would have read as some number.
		{"set", "/", "abc"},
		{"set", "/", "1abc"},
		{"set", "/", "-1"},
		{"set", "/", "+1"},
		{"set", "/", " 1"},
		{"set", "/", "1 "},
		{"set", "/", "0x10"},
		{"set", "/", "1_000"},
		{"set", "/", "1.0"},
		{"set", "/", ""},
		{"set", "/", "4294967296"},
		{"set", "/", "99999999999999999999999"},
	}
	for _, args := range cases {
		rc, out, errOut := runStream(args...)
		if rc != 2 {
			t.Errorf("Stream(%q) = %d, want 2 (usage)", args, rc)
		}
		if out != "" {
			t.Errorf("Stream(%q) wrote to stdout: %q", args, out)
		}
		if !strings.Contains(errOut, "Usage:") {
			t.Errorf("Stream(%q) stderr lacks usage: %q", args, errOut)
		}
	}
}

func TestStreamHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help", "help"} {
		rc, out, errOut := runStream(h)
		if rc != 0 || !strings.Contains(out, "Usage:") || errOut != "" {
			t.Errorf("Stream(%q) = %d, %q, %q", h, rc, out, errOut)
		}
	}
}

func TestParseStreamArgs(t *testing.T) {
	cases := []struct {
		args []string
		want streamRequest
	}{
		{[]string{"max", "/mnt/f"}, streamRequest{op: ioctl.OpGetMax, path: "/mnt/f"}},
		{[]string{"get", "f"}, streamRequest{op: ioctl.OpGet, path: "f"}},
		{[]string{"set", "f", "0"}, streamRequest{op: ioctl.OpSet, path: "f", id: 0}},
		{[]string{"set", "f", "7"}, streamRequest{op: ioctl.OpSet, path: "f", id: 7}},
		{[]string{"set", "f", "007"}, streamRequest{op: ioctl.OpSet, path: "f", id: 7}},
		// Large ids are passed through untouched: whether 65537 is valid
		// is the filesystem's decision (it must not truncate it to 1).
		{[]string{"set", "f", "65537"}, streamRequest{op: ioctl.OpSet, path: "f", id: 65537}},
		{[]string{"set", "f", "4294967295"}, streamRequest{op: ioctl.OpSet, path: "f", id: 1<<32 - 1}},
	}
	for _, tc := range cases {
		got, err := parseStreamArgs(tc.args)
		if err != nil {
			t.Errorf("parseStreamArgs(%q): %v", tc.args, err)
			continue
		}
		if got != tc.want {
			t.Errorf("parseStreamArgs(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

func TestStreamOpenFailure(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, op := range [][]string{{"max", missing}, {"get", missing}, {"set", missing, "1"}} {
		rc, out, errOut := runStream(op...)
		if rc != 1 || out != "" || !strings.HasPrefix(errOut, "streamfs stream: open ") || !strings.HasSuffix(errOut, ": No such file or directory\n") {
			t.Errorf("Stream(%q) = %d, %q, %q", op, rc, out, errOut)
		}
	}
}

// On a filesystem without write streams every operation reaches the ioctl
// and fails with ENOTTY, printed as perror would after the command and
// path, with what it means.
func TestStreamOnPlainFilesystem(t *testing.T) {
	const notStreamfs = "not on a streamfs mount (or a filesystem without write streams)\n"
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"max", file}, "streamfs stream: " + file + ": ioctl(GET_MAX) failed: Inappropriate ioctl for device: " + notStreamfs},
		{[]string{"get", file}, "streamfs stream: " + file + ": ioctl(GET) failed: Inappropriate ioctl for device: " + notStreamfs},
		{[]string{"set", file, "1"}, "streamfs stream: " + file + ": ioctl(SET) failed: Inappropriate ioctl for device: " + notStreamfs},
		{[]string{"get", dir}, "streamfs stream: " + dir + ": ioctl(GET) failed: Inappropriate ioctl for device: " + notStreamfs},
		// A directory cannot be opened for writing: set must fall back to
		// a read-only directory open and still reach the ioctl.
		{[]string{"set", dir, "1"}, "streamfs stream: " + dir + ": ioctl(SET) failed: Inappropriate ioctl for device: " + notStreamfs},
	}
	for _, tc := range cases {
		rc, out, errOut := runStream(tc.args...)
		if rc != 1 || out != "" || errOut != tc.want {
			t.Errorf("Stream(%q) = %d, %q, %q; want 1, \"\", %q", tc.args, rc, out, errOut, tc.want)
		}
	}
}

func TestOpenForStreamModes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mode := func(f *os.File) int {
		t.Helper()
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl & unix.O_ACCMODE
	}
	for _, tc := range []struct {
		path string
		op   uint32
		want int
	}{
		{file, ioctl.OpGetMax, unix.O_RDONLY},
		{file, ioctl.OpGet, unix.O_RDONLY},
		{file, ioctl.OpSet, unix.O_WRONLY},
		{dir, ioctl.OpGet, unix.O_RDONLY},
		{dir, ioctl.OpSet, unix.O_RDONLY},
	} {
		f, err := openForStream(tc.path, tc.op)
		if err != nil {
			t.Errorf("openForStream(%s, %s): %v", tc.path, ioctl.OpName(tc.op), err)
			continue
		}
		if got := mode(f); got != tc.want {
			t.Errorf("openForStream(%s, %s) access mode = %d, want %d", tc.path, ioctl.OpName(tc.op), got, tc.want)
		}
		f.Close()
	}
}

func TestCStrerror(t *testing.T) {
	cases := map[syscall.Errno]string{
		unix.EINVAL:    "Invalid argument",
		unix.EBADF:     "Bad file descriptor",
		unix.ENOTTY:    "Inappropriate ioctl for device",
		unix.ENOENT:    "No such file or directory",
		unix.EACCES:    "Permission denied",
		unix.EPERM:     "Operation not permitted",
		unix.EROFS:     "Read-only file system",
		unix.EIO:       "Input/output error",
		unix.ENOTCONN:  "Transport endpoint is not connected",
		unix.ENOSYS:    "Function not implemented",
		unix.EHWPOISON: "Memory page has hardware error",
		41:             "Unknown error 41",
		4000:           "Unknown error 4000",
	}
	for errno, want := range cases {
		if got := cStrerror(errno); got != want {
			t.Errorf("cStrerror(%d) = %q, want %q", int(errno), got, want)
		}
	}
}

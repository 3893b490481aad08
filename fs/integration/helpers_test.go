package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	// skipReason is set when the machine cannot run the suite.
	skipReason string
	// streamfsBin is the streamfs binary built by TestMain.
	streamfsBin string
	// progs maps a testdata C program's name (without .c) to its binary.
	progs = map[string]string{}
)

// hangGuard bounds any single external command or wait, so a hung mount
// fails the test with a message instead of hitting go test's timeout with
// mounts left behind. It is not a performance threshold.
const hangGuard = 5 * time.Minute

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		skipReason = "integration tests need root (FUSE mounts, losetup, chown)"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		skipReason = fmt.Sprintf("integration tests need /dev/fuse: %v", err)
	} else {
		skipReason = uringSkipReason()
	}
	if skipReason != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "streamfs-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	// The module root is two levels up from this package.
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	streamfsBin = filepath.Join(dir, "streamfs")
	build := exec.Command("go", "build", "-o", streamfsBin, ".")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building streamfs: %v\n%s", err, out)
		return 1
	}
	srcs, err := filepath.Glob("testdata/*.c")
	if err != nil || len(srcs) == 0 {
		fmt.Fprintf(os.Stderr, "no C programs in testdata: %v\n", err)
		return 1
	}
	for _, src := range srcs {
		name := strings.TrimSuffix(filepath.Base(src), ".c")
		bin := filepath.Join(dir, name)
		if out, err := exec.Command("gcc", "-Wall", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "compiling %s: %v\n%s", src, err, out)
			return 1
		}
		progs[name] = bin
	}
	return m.Run()
}

// requireEnv skips t when the machine cannot run the suite.
func requireEnv(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// runCmd runs a command and returns its combined output; it fails the test
// on a non-zero exit.
func runCmd(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := tryCmd(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// tryCmd runs a command and returns its combined output and error.
func tryCmd(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// tryCmdSplit runs a command and returns stdout, stderr and the error.
func tryCmdSplit(name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// sh runs a shell command line and fails the test on a non-zero exit.
func sh(t *testing.T, script string) string {
	t.Helper()
	return runCmd(t, "sh", "-c", script)
}

// streamfs runs the streamfs binary and fails the test on a non-zero exit.
func streamfs(t *testing.T, args ...string) string {
	t.Helper()
	return runCmd(t, streamfsBin, args...)
}

// mkfs creates a sparse image of the given size in a fresh temporary
// directory and formats it.
func mkfs(t *testing.T, size string, extra ...string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "streamfs.img")
	args := append([]string{"mkfs", "--size", size}, extra...)
	streamfs(t, append(args, img)...)
	return img
}

// syncBuffer is a bytes.Buffer safe for the daemon's writer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mount is one running `streamfs mount` daemon.
type mount struct {
	img, dir string
	opts     []string
	cmd      *exec.Cmd
	log      *syncBuffer
	exited   chan struct{}
	waitErr  error
	stopped  bool
}

// mountImage mounts img on a fresh mount point and registers its unmount
// as a cleanup.
func mountImage(t *testing.T, img string, opts ...string) *mount {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return mountAt(t, img, dir, opts...)
}

// startMount starts `streamfs mount [-o opts] img dir` in the background.
func startMount(t *testing.T, img, dir string, opts []string) *mount {
	t.Helper()
	m := &mount{img: img, dir: dir, opts: opts, log: &syncBuffer{}, exited: make(chan struct{})}
	opts = withTransport(opts)
	args := []string{"mount"}
	if len(opts) > 0 {
		args = append(args, "-o", strings.Join(opts, ","))
	}
	m.cmd = exec.Command(streamfsBin, append(args, img, dir)...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting streamfs mount: %v", err)
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		close(m.exited)
	}()
	return m
}

// mountAt starts the daemon for img on dir and waits for the mount to show
// up in /proc/self/mounts.
func mountAt(t *testing.T, img, dir string, opts ...string) *mount {
	t.Helper()
	m := startMount(t, img, dir, opts)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("streamfs mount %s log:\n%s", dir, m.log.String())
		}
		m.stop(t)
	})
	deadline := time.Now().Add(hangGuard)
	for !isMounted(dir) {
		select {
		case <-m.exited:
			m.stopped = true
			t.Fatalf("streamfs mount %s %s exited before mounting: %v\n%s", img, dir, m.waitErr, m.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("streamfs mount %s %s: no mount after %v\n%s", img, dir, hangGuard, m.log.String())
		}
	}
	// The mount shows before the daemon is done starting: go-fuse then
	// opens a file on the mount itself (its poll probe). A SIGKILL while
	// that request is read but unanswered leaves the daemon waiting on
	// itself, unkillable, until the connection is aborted. "serving" is
	// logged after that probe, so tests that kill the daemon wait for it.
	// (A daemon that only adds a second view exits instead.)
	for !strings.Contains(m.log.String(), "serving") {
		select {
		case <-m.exited:
			return m
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("streamfs mount %s %s: mounted but never logged \"serving\"\n%s", img, dir, m.log.String())
		}
	}
	return m
}

// logShows waits (up to hangGuard) for the daemon's log to contain s: the
// mount can appear before the daemon's output has been copied.
func (m *mount) logShows(s string) bool {
	deadline := time.Now().Add(hangGuard)
	for !strings.Contains(m.log.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// path joins elements under the mount point.
func (m *mount) path(elem ...string) string {
	return filepath.Join(append([]string{m.dir}, elem...)...)
}

// unmount unmounts cleanly and checks that the daemon exited with status 0.
func (m *mount) unmount(t *testing.T) {
	t.Helper()
	if m.stopped {
		return
	}
	m.stopped = true
	var out string
	var err error
	for i := 0; i < 100; i++ {
		if out, err = tryCmd("umount", m.dir); err == nil {
			break
		}
		// Busy: a process of the test may still be closing files.
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("umount %s: %v: %s", m.dir, err, out)
		_, _ = tryCmd("umount", "-l", m.dir)
	}
	select {
	case <-m.exited:
	case <-time.After(hangGuard):
		t.Errorf("streamfs mount did not exit after umount %s; killing it", m.dir)
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	if m.waitErr != nil {
		t.Errorf("streamfs mount exited with %v after umount; log:\n%s", m.waitErr, m.log.String())
	} else if log := m.log.String(); strings.Contains(log, "\tERROR\t") || strings.Contains(log, "panic") {
		t.Errorf("streamfs mount logged errors; log:\n%s", log)
	}
}

// stop is the cleanup: unmount if still mounted, never leave a mount behind.
func (m *mount) stop(t *testing.T) {
	if m.stopped {
		if isMounted(m.dir) {
			_, _ = tryCmd("umount", "-l", m.dir)
		}
		return
	}
	m.unmount(t)
	if isMounted(m.dir) {
		_, _ = tryCmd("umount", "-l", m.dir)
	}
}

// kill SIGKILLs the daemon and lazily unmounts the dead mount.
func (m *mount) kill(t *testing.T) {
	t.Helper()
	m.stopped = true
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing streamfs: %v", err)
	}
	<-m.exited
	if out, err := tryCmd("umount", "-l", m.dir); err != nil {
		t.Fatalf("umount -l %s: %v: %s", m.dir, err, out)
	}
}

// remount unmounts cleanly and mounts the same image on the same directory
// with the same options.
func (m *mount) remount(t *testing.T) *mount {
	t.Helper()
	m.unmount(t)
	return mountAt(t, m.img, m.dir, m.opts...)
}

// isMounted reports whether dir is a mount point in /proc/self/mounts.
func isMounted(dir string) bool {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && unescapeMount(fields[1]) == dir {
			return true
		}
	}
	return false
}

// unescapeMount undoes the octal escapes of /proc/self/mounts (\040 etc.).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// randBytes returns n deterministic pseudo-random bytes for seed.
func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// writeFile writes data to path and fsyncs it.
func writeFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		t.Fatalf("fsync %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
}

// checkContent fails the test unless path holds exactly want.
func checkContent(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("reading %s: %v", path, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: content differs (got %d bytes, want %d; first difference at %d)", path, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// fileSHA returns the hex sha256 of a file's content.
func fileSHA(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// treeHashes walks root and returns, per relative path, the entry's type and
// permission bits with the sha256 of a regular file or a symlink's target.
func treeHashes(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().IsRegular():
			sum, err := fileSHA(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file %v %d %s", fi.Mode().Perm(), fi.Size(), sum)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink " + target
		case fi.IsDir():
			if rel != "." {
				out[rel] = fmt.Sprintf("dir %v", fi.Mode().Perm())
			}
		default:
			out[rel] = fmt.Sprintf("other %v", fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return out
}

// compareMaps reports every key whose value differs between want and got,
// up to a limit.
func compareMaps(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	n := 0
	report := func(format string, args ...any) {
		n++
		if n <= 20 {
			t.Errorf(what+": "+format, args...)
		}
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			report("%s missing (want %s)", k, w)
		case g != w:
			report("%s:\n  got  %s\n  want %s", k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			report("%s unexpected (%s)", k, g)
		}
	}
	if n > 20 {
		t.Errorf("%s: %d differences in all", what, n)
	}
}

// runProg runs a compiled testdata program and checks it printed OK and
// exited 0.
func runProg(t *testing.T, name string, args ...string) string {
	t.Helper()
	bin, ok := progs[name]
	if !ok {
		t.Fatalf("no testdata program %s", name)
	}
	out, err := tryCmd(bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	if !hasLine(out, "OK") {
		t.Fatalf("%s %s: no OK line\n%s", name, strings.Join(args, " "), out)
	}
	return out
}

// hasLine reports whether out has a line equal to line (spaces trimmed).
func hasLine(out, line string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// statfs returns the free and total blocks of the filesystem at path.
func statfs(t *testing.T, path string) syscall.Statfs_t {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return st
}

// exitCode returns the exit status of a finished command's error, or -1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

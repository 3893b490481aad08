package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests go through mount(8): `mount -t fuse.streamfs` and an fstab
// line run mount.fuse3, which runs `streamfs IMG MNT -o OPTS` through
// /bin/sh, and streamfs's helper form puts the daemon in the background.
//
// mount(8) runs its helpers without PATH in the environment, so the shell
// mount.fuse3 starts searches its default path (/usr/local/sbin first) and
// a PATH entry alone does not reach it. The tests therefore run mount in a
// private mount namespace in which the built binary is bind-mounted over
// that first directory; nothing outside the namespace changes, and its
// mounts are invisible to (and cannot leak into) the rest of the machine.

// helperNS is a private mount namespace held open by a sleeping process.
type helperNS struct {
	pid int
	env []string
}

// newHelperNS makes the namespace and installs the built binary where the
// shell of mount.fuse3 finds it.
func newHelperNS(t *testing.T) *helperNS {
	t.Helper()
	for _, tool := range []string{"unshare", "nsenter", "mount.fuse3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	// The directory the shell searches first when PATH is unset.
	out, err := exec.Command("env", "-i", "/bin/sh", "-c", `printf %s "$PATH"`).Output()
	if err != nil {
		t.Fatalf("/bin/sh default PATH: %v", err)
	}
	first := strings.Split(string(out), ":")[0]
	if !strings.HasPrefix(first, "/usr/local/") {
		// Covering /usr/sbin or /bin would hide mount itself.
		t.Skipf("/bin/sh searches %s first; not covering it", first)
	}
	if st, err := os.Stat(first); err != nil || !st.IsDir() {
		t.Skipf("%s is not a directory: %v", first, err)
	}
	binDir := t.TempDir()
	runCmd(t, "cp", streamfsBin, filepath.Join(binDir, "streamfs"))

	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "infinity")
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = holder.Wait()
		close(exited)
	}()
	ns := &helperNS{pid: holder.Process.Pid}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		<-exited
	})
	// Wait until the holder is in its own namespace (unshare execs sleep
	// after unsharing).
	self, _ := os.Readlink("/proc/self/ns/mnt")
	deadline := time.Now().Add(hangGuard)
	for {
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", ns.pid))
		if err == nil && theirs != self {
			break
		}
		select {
		case <-exited:
			t.Fatalf("unshare --mount exited early")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("unshare --mount: no new namespace after %v", hangGuard)
		}
	}
	// PATH first: enough where mount(8) passes it on.
	ns.env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
	if out, code := ns.run("mount", "--bind", binDir, first); code != 0 {
		t.Fatalf("mount --bind %s %s in the namespace: exit %d: %s", binDir, first, code, out)
	}
	want := filepath.Join(first, "streamfs")
	if out, code := ns.run("env", "-i", "/bin/sh", "-c", "command -v streamfs"); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("in the namespace the helper shell finds %q (exit %d), want %s", out, code, want)
	}
	return ns
}

// run runs a command in the namespace and returns its combined output and
// exit status.
func (ns *helperNS) run(name string, args ...string) (string, int) {
	out, _, code := ns.runSplit(name, args...)
	return out, code
}

// runSplit runs a command in the namespace and returns stdout+stderr,
// stderr alone, and the exit status.
func (ns *helperNS) runSplit(name string, args ...string) (combined, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(ns.pid), "-m", "--", name}, args...)...)
	cmd.Env = ns.env
	// exec copies stdout and stderr in two goroutines: the buffer both
	// write to must be safe for that (syncBuffer), or -race reports it.
	var all syncBuffer
	var errb bytes.Buffer
	cmd.Stdout = &all
	cmd.Stderr = &multiWriter{&all, &errb}
	err := cmd.Run()
	return all.String(), errb.String(), exitCode(err)
}

// multiWriter writes to both buffers (io.MultiWriter, without its
// short-write checks getting in the way of two buffers). Only the stderr
// goroutine writes b.
type multiWriter struct {
	a *syncBuffer
	b *bytes.Buffer
}

func (w *multiWriter) Write(p []byte) (int, error) {
	w.a.Write(p)
	return w.b.Write(p)
}

// mountedIn reports whether dir is a mount point in the namespace, with
// its source and type from /proc/PID/mounts.
func (ns *helperNS) mountedIn(dir string) (source, fstype string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", ns.pid))
	if err != nil {
		return "", "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && unescapeMount(f[1]) == dir {
			source, fstype, ok = unescapeMount(f[0]), f[2], true
		}
	}
	return source, fstype, ok
}

// imageDaemons returns the pids of processes whose command line names img.
func imageDaemons(img string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			if string(arg) == img {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// waitNoDaemon waits until no process names img and reports whether that
// happened within hangGuard.
func waitNoDaemon(img string) bool {
	deadline := time.Now().Add(hangGuard)
	for len(imageDaemons(img)) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// cleanupMount registers the last-resort cleanup of a helper mount: a lazy
// unmount in the namespace and SIGKILL for any daemon left serving img.
func (ns *helperNS) cleanupMount(t *testing.T, img, dir string) {
	t.Cleanup(func() {
		if _, _, ok := ns.mountedIn(dir); ok {
			_, _ = ns.run("umount", "-l", dir)
		}
		for _, pid := range imageDaemons(img) {
			t.Logf("killing leftover streamfs daemon %d for %s", pid, img)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// checkHelperMount checks a mount made through mount(8) right after mount
// returned: mounted in the namespace as fuse.streamfs from img, the
// directory is the streamfs root (a new device, empty), and it takes a
// file. It returns the daemon's pid.
func (ns *helperNS) checkHelperMount(t *testing.T, img, dir, file string) int {
	t.Helper()
	source, fstype, ok := ns.mountedIn(dir)
	if !ok {
		t.Fatalf("%s is not mounted after mount returned", dir)
	}
	if fstype != "fuse.streamfs" || source != img {
		t.Errorf("%s mounted as %s from %s, want fuse.streamfs from %s", dir, fstype, source, img)
	}
	out, code := ns.run("stat", "-c", "%d %F", dir, filepath.Dir(dir))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasSuffix(lines[0], " directory") || lines[0] == lines[1] {
		t.Errorf("stat %s right after mount: exit %d, want a directory on its own device:\n%s", dir, code, out)
	}
	data := fmt.Sprintf("written through the helper mount of %s\n", img)
	if out, code := ns.run("sh", "-c", `printf %s "$1" > "$2" && sync "$2" && cat "$2"`, "sh", data, filepath.Join(dir, file)); code != 0 || out != data {
		t.Errorf("writing %s on the helper mount: exit %d: %q", file, code, out)
	}
	out, code = ns.run("df", "-T", dir)
	if code != 0 {
		t.Errorf("df -T %s: exit %d: %s", dir, code, out)
	} else if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
		len(strings.Fields(lines[1])) < 2 || strings.Fields(lines[1])[0] != img || strings.Fields(lines[1])[1] != "fuse.streamfs" {
		t.Errorf("df -T %s: want %s and type fuse.streamfs:\n%s", dir, img, out)
	}
	pids := imageDaemons(img)
	if len(pids) != 1 {
		t.Fatalf("%d processes serve %s after mount returned, want one daemon: %v", len(pids), img, pids)
	}
	return pids[0]
}

// unmountHelper unmounts with umount(8) and checks the daemon exits.
func (ns *helperNS) unmountHelper(t *testing.T, img, dir string) {
	t.Helper()
	if out, code := ns.run("umount", dir); code != 0 {
		t.Fatalf("umount %s: exit %d: %s", dir, code, out)
	}
	if _, _, ok := ns.mountedIn(dir); ok {
		t.Errorf("%s still mounted after umount", dir)
	}
	if !waitNoDaemon(img) {
		t.Errorf("the streamfs daemon for %s did not exit after umount: %v", img, imageDaemons(img))
	}
}

// TestMountHelper mounts with `mount -t fuse.streamfs`, which must return
// only once the mount is ready, and unmounts with umount.
func TestMountHelper(t *testing.T) {
	requireEnv(t)
	ns := newHelperNS(t)
	img := mkfs(t, "256M")
	dir := emptyDir(t)
	ns.cleanupMount(t, img, dir)

	out, stderr, code := ns.runSplit("mount", "-t", "fuse.streamfs", img, dir, "-o", "allow_other,noatime")
	if code != 0 {
		t.Fatalf("mount -t fuse.streamfs: exit %d:\n%s", code, out)
	}
	checkNoPanic(t, "mount -t fuse.streamfs", out)
	if stderr != "" {
		t.Errorf("mount -t fuse.streamfs wrote to stderr on success:\n%s", stderr)
	}
	ns.checkHelperMount(t, img, dir, "hello")
	if _, _, ok := ns.mountedIn(dir); ok {
		opts, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mounts", ns.pid))
		for _, line := range strings.Split(string(opts), "\n") {
			if f := strings.Fields(line); len(f) >= 4 && unescapeMount(f[1]) == dir && !strings.Contains(f[3], "allow_other") {
				t.Errorf("allow_other did not reach the mount: %s", line)
			}
		}
	}
	ns.unmountHelper(t, img, dir)

	// The file is on the image: the foreground mount sees it.
	m := mountImage(t, img)
	checkContent(t, m.path("hello"), []byte(fmt.Sprintf("written through the helper mount of %s\n", img)))
	m.unmount(t)
}

// TestMountHelperFstab mounts through a temporary fstab (mount -T FSTAB
// MNT), the way an /etc/fstab line works.
func TestMountHelperFstab(t *testing.T) {
	requireEnv(t)
	ns := newHelperNS(t)
	img := mkfs(t, "256M")
	dir := emptyDir(t)
	ns.cleanupMount(t, img, dir)
	fstab := filepath.Join(t.TempDir(), "fstab")
	line := fmt.Sprintf("%s %s fuse.streamfs defaults,noauto 0 0\n", img, dir)
	if err := os.WriteFile(fstab, []byte("# test fstab\n"+line), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := ns.run("mount", "-T", fstab, dir); code != 0 {
		t.Fatalf("mount -T %s %s (%s): exit %d:\n%s", fstab, dir, strings.TrimSpace(line), code, out)
	}
	ns.checkHelperMount(t, img, dir, "from-fstab")
	ns.unmountHelper(t, img, dir)

	// The long option, and the mount point given by its source.
	if out, code := ns.run("mount", "--fstab", fstab, img); code != 0 {
		t.Fatalf("mount --fstab %s %s: exit %d:\n%s", fstab, img, code, out)
	}
	ns.checkHelperMount(t, img, dir, "from-fstab-2")
	ns.unmountHelper(t, img, dir)
}

// TestMountHelperFailure checks that a helper mount that cannot work makes
// mount(8) fail with the reason on its stderr and leaves no daemon behind.
func TestMountHelperFailure(t *testing.T) {
	requireEnv(t)
	ns := newHelperNS(t)
	img := mkfs(t, "256M")
	full := emptyDir(t)
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.img")
	foreign := filepath.Join(t.TempDir(), "foreign.img")
	if err := os.WriteFile(foreign, randBytes(61, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, img, dir, opts, want string
	}{
		{"non-empty mount point", img, full, "rw", "not an empty directory"},
		{"missing image", missing, emptyDir(t), "rw", "no such file"},
		{"foreign image", foreign, emptyDir(t), "rw", "not a streamfs"},
		{"unknown option", img, emptyDir(t), "rw,bogus", "bogus"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			ns.cleanupMount(t, c.img, c.dir)
			out, stderr, code := ns.runSplit("mount", "-t", "fuse.streamfs", c.img, c.dir, "-o", c.opts)
			checkNoPanic(t, "mount -t fuse.streamfs", out)
			if code == 0 {
				t.Fatalf("mount -t fuse.streamfs %s %s succeeded:\n%s", c.img, c.dir, out)
			}
			t.Logf("mount -t fuse.streamfs: exit %d: %s", code, strings.TrimSpace(stderr))
			if !strings.Contains(strings.ToLower(stderr), c.want) {
				t.Errorf("mount -t fuse.streamfs: exit %d, stderr does not give the reason %q:\n%s", code, c.want, stderr)
			}
			if _, _, ok := ns.mountedIn(c.dir); ok {
				t.Errorf("the failed mount left %s mounted", c.dir)
			}
			if !waitNoDaemon(c.img) {
				t.Errorf("a streamfs daemon is left running for %s: %v", c.img, imageDaemons(c.img))
			}
		})
	}
	// The image the failures named is unharmed and mounts.
	dir := emptyDir(t)
	ns.cleanupMount(t, img, dir)
	if out, code := ns.run("mount", "-t", "fuse.streamfs", img, dir); code != 0 {
		t.Fatalf("mount -t fuse.streamfs after the failures: exit %d:\n%s", code, out)
	}
	pid := ns.checkHelperMount(t, img, dir, "after")

	// A daemon killed under its mount leaves a dead mount: mounting there
	// again fails and says how to clear it.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitNoDaemon(img) {
		t.Fatalf("the killed daemon %d is still there", pid)
	}
	out, stderr, code := ns.runSplit("mount", "-t", "fuse.streamfs", img, dir)
	checkNoPanic(t, "mount on a dead mount", out)
	t.Logf("mount -t fuse.streamfs on a dead mount: exit %d: %s", code, strings.TrimSpace(stderr))
	if code == 0 || !strings.Contains(stderr, "umount -l") {
		t.Errorf("mount -t fuse.streamfs on a dead mount: exit %d, want a failure that explains umount -l:\n%s", code, out)
	}
	if !waitNoDaemon(img) {
		t.Errorf("a streamfs daemon is left running for %s: %v", img, imageDaemons(img))
	}
	if out, code := ns.run("umount", "-l", dir); code != 0 {
		t.Fatalf("umount -l %s: exit %d: %s", dir, code, out)
	}
	if out, code := ns.run("mount", "-t", "fuse.streamfs", img, dir); code != 0 {
		t.Fatalf("mount -t fuse.streamfs after umount -l: exit %d:\n%s", code, out)
	}
	ns.checkHelperMount(t, img, dir, "after-crash")
	ns.unmountHelper(t, img, dir)
}

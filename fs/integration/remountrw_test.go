package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// mountFlagsOf returns the per-mount flags (mountinfo's sixth field, "ro,"
// or "rw,...") of the mount at dir in the mount table file.
func mountFlagsOf(t *testing.T, table, dir string) string {
	t.Helper()
	b, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	flags := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && unescapeMount(f[4]) == dir {
			flags = f[5]
		}
	}
	return flags
}

// writeSynced writes data to p with the shell and fsyncs it (dd
// conv=fsync), reporting the output on failure.
func writeSynced(run func(name string, args ...string) (string, int), p, data string) (string, int) {
	return run("sh", "-c", `printf %s "$1" | dd of="$2" conv=fsync status=none`, "sh", data, p)
}

// A read-only mount whose journal holds committed changes (the daemon of
// a read-write mount was killed) goes read-write with mount(8): the
// replayed state and what is written and fsynced after the remount survive
// another kill -9, and fsck is clean.
func TestRemountReadOnlyToReadWrite(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	writeFile(t, m.path("before"), randBytes(1, 300000), 0o644)
	syncPath(t, m.path("before"))
	m.kill(t) // its journal holds "before"; no checkpoint does

	ns := newHelperNS(t)
	dir := emptyDir(t)
	ns.cleanupMount(t, img, dir)
	if out, code := ns.run("mount", "-t", "fuse.streamfs", "-o", "ro", img, dir); code != 0 {
		t.Fatalf("mount -o ro: exit %d: %s", code, out)
	}
	table := fmt.Sprintf("/proc/%d/mountinfo", ns.pid)
	if fl := mountFlagsOf(t, table, dir); !strings.HasPrefix(fl, "ro") {
		t.Fatalf("mounted with flags %q, want ro", fl)
	}
	if out, code := ns.run("cat", filepath.Join(dir, "before")); code != 0 || out != string(randBytes(1, 300000)) {
		t.Fatalf("reading the replayed file on the read-only mount: exit %d, %d bytes", code, len(out))
	}
	if out, code := writeSynced(ns.run, filepath.Join(dir, "refused"), "x"); code == 0 || !strings.Contains(out, "Read-only") {
		t.Fatalf("write on the read-only mount: exit %d: %s", code, out)
	}
	if out, code := ns.run("mount", "-o", "remount,rw", dir); code != 0 {
		t.Fatalf("mount -o remount,rw: exit %d: %s", code, out)
	}
	if fl := mountFlagsOf(t, table, dir); !strings.HasPrefix(fl, "rw") {
		t.Fatalf("after remount,rw the mount's flags are %q", fl)
	}
	// The daemon kept the image's lock through the reopen.
	if out, err := tryCmd("flock", "-n", "-x", img, "true"); err == nil {
		t.Fatalf("the image's lock is free after the remount read-write: %s", out)
	}
	if out, code := writeSynced(ns.run, filepath.Join(dir, "after"), "written after remount,rw\n"); code != 0 {
		t.Fatalf("write + fsync after remount,rw: exit %d: %s", code, out)
	}
	// ro and rw again: a cycle works, and rw writes again.
	for _, o := range []string{"remount,ro", "remount,rw"} {
		if out, code := ns.run("mount", "-o", o, dir); code != 0 {
			t.Fatalf("mount -o %s: exit %d: %s", o, code, out)
		}
	}
	if out, code := writeSynced(ns.run, filepath.Join(dir, "cycled"), "after a cycle\n"); code != 0 {
		t.Fatalf("write + fsync after ro and rw again: exit %d: %s", code, out)
	}
	pids := imageDaemons(img)
	if len(pids) != 1 {
		t.Fatalf("daemons serving %s: %v, want one", img, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitNoDaemon(img) {
		t.Fatalf("the killed daemon of %s is still there", img)
	}
	if out, code := ns.run("umount", "-l", dir); code != 0 {
		t.Fatalf("umount -l: exit %d: %s", code, out)
	}

	m = mountImage(t, img)
	checkContent(t, m.path("before"), randBytes(1, 300000))
	checkContent(t, m.path("after"), []byte("written after remount,rw\n"))
	checkContent(t, m.path("cycled"), []byte("after a cycle\n"))
	if _, err := os.Stat(m.path("refused")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write refused while read-only left a file: %v", err)
	}
	m.unmount(t)
	if out, err := tryCmd(streamfsBin, "fsck", "-n", img); err != nil {
		t.Fatalf("fsck -n: %v\n%s", err, out)
	}
}

// A block device mounted read-only goes read-write with `streamfs mount -o
// remount,rw`: the device is reopened without giving up its O_EXCL claim.
func TestRemountReadWriteBlockDevice(t *testing.T) {
	requireEnv(t)
	dev := loopDev(t, false)
	m := mountImage(t, dev, "ro")
	checkContent(t, m.path("f"), []byte("on the image\n"))
	streamfs(t, "mount", "-o", "remount,rw", dev, m.dir)
	if fd, err := syscall.Open(dev, syscall.O_RDONLY|syscall.O_EXCL, 0); err == nil {
		syscall.Close(fd)
		t.Fatalf("%s opened O_EXCL by another process after the remount read-write", dev)
	} else if !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("O_EXCL open of %s: %v, want EBUSY", dev, err)
	}
	writeFile(t, m.path("g"), randBytes(2, 1<<20), 0o644)
	syncPath(t, m.path("g"))
	m.kill(t)
	m = mountImage(t, dev)
	checkContent(t, m.path("g"), randBytes(2, 1<<20))
	m.unmount(t)
	if out, err := tryCmd(streamfsBin, "fsck", "-n", dev); err != nil {
		t.Fatalf("fsck -n: %v\n%s", err, out)
	}
}

// A remount read-write is refused, leaving the mount read-only and
// working, when the device is write-protected (a read-only loop device)
// and when the mount skipped journal replay (norecovery).
func TestRemountReadWriteRefused(t *testing.T) {
	requireEnv(t)
	t.Run("write-protected", func(t *testing.T) {
		dev := loopDev(t, true)
		m := mountImage(t, dev) // mounts read-only by itself
		if !m.logShows("write-protected") {
			t.Fatalf("no write-protected note in the log:\n%s", m.log.String())
		}
		checkContent(t, m.path("f"), []byte("on the image\n"))
		out, err := tryCmd(streamfsBin, "mount", "-o", "remount,rw", dev, m.dir)
		if err == nil || !strings.Contains(out, "write-protected") {
			t.Fatalf("remount,rw of a write-protected device: %v: %s", err, out)
		}
		if fl := mountFlagsOf(t, "/proc/self/mountinfo", m.dir); !strings.HasPrefix(fl, "ro") {
			t.Errorf("flags %q after the refusal, want ro", fl)
		}
		checkContent(t, m.path("f"), []byte("on the image\n"))
		if err := os.WriteFile(m.path("g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Errorf("create after the refusal: %v, want EROFS", err)
		}
		m.unmount(t)
	})
	t.Run("norecovery", func(t *testing.T) {
		img := mkfs(t, "256M")
		m := mountImage(t, img)
		writeFile(t, m.path("journaled"), []byte("only in the journal\n"), 0o644)
		syncPath(t, m.path("journaled"))
		m.kill(t)
		m = mountImage(t, img, "ro", "norecovery")
		if _, err := os.Stat(m.path("journaled")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("norecovery shows the journaled file: %v", err)
		}
		out, err := tryCmd(streamfsBin, "mount", "-o", "remount,rw", img, m.dir)
		if err == nil || !strings.Contains(out, "norecovery") {
			t.Fatalf("remount,rw of a norecovery mount: %v: %s", err, out)
		}
		if fl := mountFlagsOf(t, "/proc/self/mountinfo", m.dir); !strings.HasPrefix(fl, "ro") {
			t.Errorf("flags %q after the refusal, want ro", fl)
		}
		if _, err := os.ReadDir(m.dir); err != nil {
			t.Errorf("readdir after the refusal: %v", err)
		}
		m.unmount(t)
		// The journal was not overwritten: a read-write mount replays it.
		m = mountImage(t, img)
		checkContent(t, m.path("journaled"), []byte("only in the journal\n"))
		m.unmount(t)
	})
}

// loopDev attaches a formatted image holding file f to a loop device,
// read-only (losetup --read-only) if ro, and detaches it at the end.
func loopDev(t *testing.T, ro bool) string {
	t.Helper()
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), []byte("on the image\n"), 0o644)
	m.unmount(t)
	args := []string{"--find", "--show"}
	if ro {
		args = append(args, "--read-only")
	}
	out, err := tryCmd("losetup", append(args, img)...)
	if err != nil {
		t.Skipf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(out)
	t.Cleanup(func() {
		if out, err := tryCmd("losetup", "-d", dev); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

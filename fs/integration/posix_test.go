package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/ioctl"
)

// Kernel-filesystem behaviour a FUSE daemon must provide itself.

// Names longer than NAME_MAX answer ENAMETOOLONG on every path operation;
// 255 bytes still work.
func TestNameTooLong(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	long := m.path(strings.Repeat("a", 256))
	ok := m.path(strings.Repeat("b", 255))
	writeFile(t, ok, []byte("x"), 0o644)
	checks := map[string]error{}
	_, checks["stat"] = os.Stat(long)
	_, checks["create"] = os.Create(long)
	checks["mkdir"] = os.Mkdir(long, 0o755)
	checks["mknod"] = syscall.Mknod(long, syscall.S_IFIFO|0o644, 0)
	checks["symlink"] = os.Symlink("target", long)
	checks["link"] = os.Link(ok, long)
	checks["rename"] = os.Rename(ok, long)
	for op, err := range checks {
		if !errors.Is(err, syscall.ENAMETOOLONG) {
			t.Errorf("%s of a 256-byte name: %v, want ENAMETOOLONG", op, err)
		}
	}
	checkContent(t, ok, []byte("x"))
}

// atime follows relatime (default), strictatime and noatime.
func TestAtime(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	atime := func(p string) time.Time {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix())
	}
	read := func(p string) {
		t.Helper()
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	setOld := func(p string) {
		t.Helper()
		// touch -a: only atime.
		ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), {Nsec: unix.UTIME_OMIT}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		opt          string
		first, again bool // atime changes on the first read after setOld, and on a second read
	}{{"", true, false}, {"relatime", true, false}, {"strictatime", true, true}, {"noatime", false, false}} {
		t.Run("opt="+c.opt, func(t *testing.T) {
			var opts []string
			if c.opt != "" {
				opts = append(opts, c.opt)
			}
			m := mountImage(t, img, opts...)
			p := m.path("a")
			writeFile(t, p, []byte("a\n"), 0o644)
			setOld(p)
			read(p)
			a1 := atime(p)
			if changed := !a1.Equal(old); changed != c.first {
				t.Errorf("first read: atime %v (changed %v, want %v)", a1, changed, c.first)
			}
			if !c.first {
				m.unmount(t)
				return
			}
			time.Sleep(10 * time.Millisecond) // the clock must move for strictatime to show
			read(p)
			if changed := !atime(p).Equal(a1); changed != c.again {
				t.Errorf("second read: atime changed %v, want %v", changed, c.again)
			}
			// The atime is stored: it survives a remount.
			want := atime(p)
			m = m.remount(t)
			if got := atime(m.path("a")); !got.Equal(want) {
				t.Errorf("after remount atime %v, want %v", got, want)
			}
			m.unmount(t)
		})
	}
}

// mmap(MAP_SHARED) of a file opened with O_DIRECT works (the kernel's
// DIRECT_IO_ALLOW_MMAP).
func TestDirectIOMmap(t *testing.T) {
	requireEnv(t)
	if _, err := exec.LookPath("xfs_io"); err != nil {
		t.Skip("xfs_io not installed")
	}
	m := mountImage(t, mkfs(t, "256M"))
	out := runCmd(t, "xfs_io", "-f", "-d", "-c", "pwrite -S 0x5a 0 4k", "-c", "mmap -r 0 4k", "-c", "mread -v 0 4", m.path("d"))
	if !strings.Contains(out, "5a 5a 5a 5a") {
		t.Errorf("mmap of an O_DIRECT file:\n%s", out)
	}
}

// FITRIM honours start, len and minlen and refuses what XFS refuses.
func TestFitrimRange(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	for _, args := range [][]string{{"-o", "8T"}, {"-l", "0"}, {"-m", "1T"}} {
		if out, err := tryCmd("fstrim", append(args, m.dir)...); err == nil || !strings.Contains(out, "Invalid argument") {
			t.Errorf("fstrim %v: %v %s; want EINVAL", args, err, out)
		}
	}
	var r ioctl.FstrimRange
	trim := func(start, length uint64) uint64 {
		t.Helper()
		f, err := os.Open(m.dir)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r = ioctl.FstrimRange{Start: start, Len: length}
		if err := ioctl.Fitrim(f.Fd(), &r); err != nil {
			t.Fatalf("FITRIM %d+%d: %v", start, length, err)
		}
		return r.Len
	}
	all := trim(0, ^uint64(0))
	// 160 MiB lies in the middle of AG 2 (4 AGs of 64 MiB), away from the
	// tree nodes at the start of each AG: all free on a new filesystem.
	part := trim(160<<20, 1<<20)
	if part != 1<<20 {
		t.Errorf("FITRIM of 1 MiB of free space at 160 MiB trimmed %d bytes, want %d", part, 1<<20)
	}
	if all <= part || all > 256<<20 {
		t.Errorf("FITRIM of everything trimmed %d bytes (range: %d)", all, part)
	}
}

// lseek(fd, -1, SEEK_DATA) is ENXIO, as on XFS.
func TestSeekDataNegative(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	writeFile(t, m.path("f"), []byte("data"), 0o644)
	f, err := os.Open(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, whence := range []int{unix.SEEK_DATA, unix.SEEK_HOLE} {
		if _, err := unix.Seek(int(f.Fd()), -1, whence); !errors.Is(err, syscall.ENXIO) {
			t.Errorf("lseek(-1, %d): %v, want ENXIO", whence, err)
		}
	}
}

// mountFlags returns the per-mount options of dir from /proc/self/mountinfo.
func mountFlags(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && unescapeMount(f[4]) == dir {
			return f[5]
		}
	}
	t.Fatalf("%s not in mountinfo", dir)
	return ""
}

// Device nodes and set-id bits work on a root mount unless nodev/nosuid
// say otherwise.
func TestSuidDev(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	if fl := mountFlags(t, m.dir); strings.Contains(fl, "nosuid") || strings.Contains(fl, "nodev") {
		t.Errorf("default mount flags %s; want suid and dev", fl)
	}
	if err := syscall.Mknod(m.path("null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.path("null"), []byte("x"), 0); err != nil {
		t.Errorf("writing to a /dev/null node on the mount: %v", err)
	}
	m.unmount(t)
	m = mountImage(t, img, "nodev", "nosuid", "noexec")
	fl := mountFlags(t, m.dir)
	for _, w := range []string{"nodev", "nosuid", "noexec"} {
		if !strings.Contains(fl, w) {
			t.Errorf("mount flags %s lack %s", fl, w)
		}
	}
	if err := os.WriteFile(m.path("null"), []byte("x"), 0); !errors.Is(err, syscall.EACCES) {
		t.Errorf("device node with nodev: %v, want EACCES", err)
	}
}

// File handles resolve after the inode left the kernel's cache and after
// a remount.
func TestFileHandles(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("d", "f"), []byte("hello handle\n"), 0o644)
	hf := filepath.Join(t.TempDir(), "h-file")
	hd := filepath.Join(t.TempDir(), "h-dir")
	runProg(t, "handle", "save", m.path("d", "f"), hf)
	runProg(t, "handle", "save", m.path("d"), hd)
	if out := runProg(t, "handle", "open", m.dir, hf); !strings.Contains(out, "hello handle") {
		t.Errorf("open_by_handle_at: %s", out)
	}
	m = m.remount(t)
	if out := runProg(t, "handle", "open", m.dir, hf); !strings.Contains(out, "hello handle") {
		t.Errorf("open_by_handle_at after remount: %s", out)
	}
	if out := runProg(t, "handle", "open", m.dir, hd); !strings.Contains(out, "directory") {
		t.Errorf("open_by_handle_at of a directory after remount: %s", out)
	}
	// A removed file's handle is stale.
	if err := os.Remove(m.path("d", "f")); err != nil {
		t.Fatal(err)
	}
	m = m.remount(t)
	out, err := tryCmd(progs["handle"], "open", m.dir, hf)
	if err == nil || !strings.Contains(out, "Stale file handle") {
		t.Errorf("handle of a removed file: %v %s; want ESTALE", err, out)
	}
}

// norecovery mounts read-only without replaying the journal.
func TestNoRecovery(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img, "commit=3600")
	writeFile(t, m.path("journaled"), []byte("in the journal only\n"), 0o644)
	m.kill(t)
	if out, err := tryCmd(streamfsBin, "mount", "-o", "norecovery", img, t.TempDir()); exitCode(err) != 2 || !strings.Contains(out, "needs -o ro") {
		t.Errorf("norecovery without ro: %v %s", err, out)
	}
	m = mountImage(t, img, "ro", "norecovery")
	if _, err := os.Stat(m.path("journaled")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("norecovery: journaled file: %v, want it absent (not replayed)", err)
	}
	m.unmount(t)
	m = mountImage(t, img)
	checkContent(t, m.path("journaled"), []byte("in the journal only\n"))
}

// SET on a directory honours the caller's supplementary groups.
func TestStreamDirSupplementaryGroup(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"), "allow_other")
	for p := m.dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil && !errors.Is(err, os.ErrPermission) {
			t.Fatal(err)
		}
	}
	const group = 4242
	dir := m.path("shared")
	if err := os.Mkdir(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, group); err != nil {
		t.Fatal(err)
	}
	bin := m.path("streamfs")
	runCmd(t, "cp", streamfsBin, bin)
	run := func(groups ...uint32) (string, error) {
		cmd := exec.Command(bin, "stream", "set", dir, "1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: groups}}
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(group); err != nil {
		t.Errorf("SET by a member of the directory's group (supplementary): %v %s", err, out)
	}
	if out, err := run(group + 1); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("SET by a non-member: %v %s; want EPERM", err, out)
	}
}

// FS_IOC_SHUTDOWN from xfs_io and from a C program: later changes fail,
// what was flushed survives a remount.
func TestShutdownIoctl(t *testing.T) {
	requireEnv(t)
	if _, err := exec.LookPath("xfs_io"); err != nil {
		t.Skip("xfs_io not installed")
	}
	img := mkfs(t, "256M")
	m := mountImage(t, img, "commit=3600")
	if err := os.WriteFile(m.path("before"), []byte("flushed by shutdown -f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "xfs_io", "-x", "-c", "shutdown -f", m.dir)
	if err := os.WriteFile(m.path("after"), nil, 0o644); !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EIO) {
		t.Errorf("create after shutdown: %v, want EROFS or EIO", err)
	}
	m.unmount(t)
	m = mountImage(t, img, "commit=3600")
	checkContent(t, m.path("before"), []byte("flushed by shutdown -f\n"))
	if _, err := os.Stat(m.path("after")); err == nil {
		t.Error("a file created after the shutdown exists")
	}
	// NOLOGFLUSH (2) drops what was not committed.
	if err := os.WriteFile(m.path("lost"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	runProg(t, "shutdown", m.dir, "2")
	m.unmount(t)
	m = mountImage(t, img)
	if _, err := os.Stat(m.path("lost")); err == nil {
		t.Error("NOLOGFLUSH: an uncommitted file survived")
	}
	checkContent(t, m.path("before"), []byte("flushed by shutdown -f\n"))
	out, err := tryCmd(streamfsBin, "fsck", img)
	if err == nil {
		t.Logf("fsck: %s", out)
	}
}

// mount(8)'s remount,ro and remount,rw reach the kernel and the daemon.
func TestRemountThroughMount8(t *testing.T) {
	requireEnv(t)
	ns := newHelperNS(t)
	img := mkfs(t, "256M")
	dir := emptyDir(t)
	ns.cleanupMount(t, img, dir)
	if out, code := ns.run("mount", "-t", "fuse.streamfs", img, dir); code != 0 {
		t.Fatalf("mount: exit %d: %s", code, out)
	}
	write := func(name string) (string, int) {
		return ns.run("sh", "-c", "echo x > "+filepath.Join(dir, name))
	}
	if out, code := write("a"); code != 0 {
		t.Fatalf("write: %s", out)
	}
	if out, code := ns.run("mount", "-o", "remount,ro", dir); code != 0 {
		t.Fatalf("mount -o remount,ro: exit %d: %s", code, out)
	}
	if out, code := write("b"); code == 0 || !strings.Contains(out, "Read-only") {
		t.Errorf("write after remount,ro: exit %d %s", code, out)
	}
	if out, code := ns.run("mount", "-o", "remount,rw", dir); code != 0 {
		t.Fatalf("mount -o remount,rw: exit %d: %s", code, out)
	}
	if out, code := write("c"); code != 0 {
		t.Errorf("write after remount,rw: %s", out)
	}
	ns.unmountHelper(t, img, dir)
	m := mountImage(t, img)
	checkContent(t, m.path("c"), []byte("x\n"))
}

// The tools wait for a device lock held by an exiting daemon and say so.
func TestLockWait(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	// A stand-in for a daemon still exiting after umount: holds the lock.
	// -o: flock itself holds the lock, not sleep, so killing the group
	// releases it.
	holder := exec.Command("flock", "-x", "-o", img, "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Skipf("flock: %v", err)
	}
	release := func() {
		_ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL)
		_ = holder.Wait()
	}
	defer release()
	for i := 0; i < 500 && !strings.Contains(readLocks(), fmt.Sprint(holder.Process.Pid)); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	cmd := exec.Command(streamfsBin, "fsck", img)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout syncBuffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 200)
	n, _ := stderr.Read(line)
	got := string(line[:n])
	if !strings.Contains(got, "waiting for the device lock held by PID") {
		t.Errorf("fsck stderr %q; want the waiting line", got)
	}
	release()
	if err := cmd.Wait(); err != nil {
		t.Errorf("fsck after the lock was released: %v\n%s", err, stdout.String())
	}
}

func readLocks() string {
	b, _ := os.ReadFile("/proc/locks")
	return string(b)
}

// TestAtimeNewFile: a new file's atime is never after its mtime, so under
// relatime (the default) its first read updates atime. The kernel stamps
// mtime with its own, coarser clock when it writes the times back, a
// little before the daemon's stamp at create. (Large enough for the
// writeback cache: a nearly full filesystem writes through.)
func TestAtimeNewFile(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	m := mountImage(t, img)
	for i := range 20 {
		p := m.path(fmt.Sprintf("f%d", i))
		writeFile(t, p, []byte("x\n"), 0o644) // echo x > f
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		atime, mtime := time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())
		if atime.After(mtime) {
			t.Errorf("%s: new file's atime %v is after its mtime %v", p, atime, mtime)
		}
		if _, err := os.ReadFile(p); err != nil { // cat f
			t.Fatal(err)
		}
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if a := time.Unix(st.Atim.Unix()); !a.After(atime) {
			t.Errorf("%s: the first read left atime at %v (mtime %v): relatime must update it", p, a, mtime)
		}
	}
	m.unmount(t)
}

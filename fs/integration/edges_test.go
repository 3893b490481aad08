package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Where the kernel's caches and the daemon meet: what xfstests found
// (generic/737, 050, 451, 474 and SEEK_DATA after a buffered write), each
// driven through the kernel by real tools.

// needTool skips t without the named program.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

// godown shuts the filesystem down as xfstests' godown does: xfs_io's
// shutdown without -f is FS_IOC_SHUTDOWN with NOLOGFLUSH, so whatever was
// not committed is lost.
func godown(t *testing.T, m *mount) {
	t.Helper()
	runCmd(t, "xfs_io", "-x", "-c", "shutdown", m.dir)
}

// An O_SYNC or O_DSYNC write is durable when it returns, the file's
// creation and name with it, with no fsync (generic/737): xfs_io -fsd
// (O_DIRECT|O_SYNC), pwrite and AIO from a C program (O_SYNC, O_DSYNC and
// RWF_DSYNC) and fio with libaio and sync=1, then a shutdown that drops
// every uncommitted change, then a remount.
func TestOSyncWriteSurvivesShutdown(t *testing.T) {
	requireEnv(t)
	needTool(t, "xfs_io")
	// Large enough for buffered opens to get the writeback cache.
	img := mkfs(t, "4G")
	// No periodic commit during the test: only the writes themselves commit.
	m := mountImage(t, img, "commit=3600")
	runCmd(t, "xfs_io", "-fsd", "-c", "pwrite -q -S 0x5a 0 1M", m.path("t2"))
	// Buffered O_SYNC: the kernel writes back and sends FSYNC itself.
	runCmd(t, "xfs_io", "-fs", "-c", "pwrite -q -S 0x6b 0 256k", m.path("buffered"))
	runProg(t, "osync", m.dir)
	want := map[string][]byte{
		"t2":           bytes.Repeat([]byte{0x5a}, 1<<20),
		"buffered":     bytes.Repeat([]byte{0x6b}, 256<<10),
		"dsync-pwrite": bytes.Repeat([]byte{0x11}, 1<<20),
		"dsync-aio":    bytes.Repeat([]byte{0x22}, 512<<10),
		"rwf-dsync":    bytes.Repeat([]byte{0x33}, 512<<10),
	}
	if _, err := exec.LookPath("fio"); err == nil {
		out, err := tryCmd("fio", "--name=osync", "--filename="+m.path("fio"), "--ioengine=libaio",
			"--direct=1", "--sync=1", "--rw=write", "--bs=64k", "--size=1m", "--iodepth=8",
			"--buffer_pattern=0x44", "--output-format=terse")
		if err != nil {
			t.Fatalf("fio: %v\n%s", err, out)
		}
		want["fio"] = bytes.Repeat([]byte{0x44}, 1<<20)
	}
	// The control: a direct write without O_SYNC is not durable until
	// something commits, so the shutdown must drop it; if it survived,
	// this test could not tell a synchronous write from a lucky one.
	runCmd(t, "xfs_io", "-fd", "-c", "pwrite -q 0 64k", m.path("not-synced"))
	godown(t, m)
	m.unmount(t)
	m = mountImage(t, img, "commit=3600")
	for name, data := range want {
		checkContent(t, m.path(name), data)
	}
	if _, err := os.Stat(m.path("not-synced")); err == nil {
		t.Error("a file written without O_SYNC survived the shutdown: the shutdown did not drop uncommitted changes")
	}
}

// A new file's name is durable once its directory is fsync'd (generic/474
// needs syncfs, which never reaches a FUSE daemon; fsync of the directory
// is what to use instead).
func TestDirFsyncSurvivesShutdown(t *testing.T) {
	requireEnv(t)
	needTool(t, "xfs_io")
	img := mkfs(t, "256M")
	m := mountImage(t, img, "commit=3600")
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "xfs_io", "-r", "-c", "fsync", m.path("d"))
	if err := os.WriteFile(m.path("d", "entry"), []byte("named\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The file itself is not fsync'd; its directory is.
	runCmd(t, "xfs_io", "-r", "-c", "fsync", m.path("d"))
	// The control, created after the last fsync, must be lost.
	if err := os.WriteFile(m.path("d", "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	godown(t, m)
	m.unmount(t)
	m = mountImage(t, img, "commit=3600")
	if _, err := os.Stat(m.path("d", "entry")); err != nil {
		t.Errorf("the entry of a new file did not survive an fsync of its directory and a shutdown: %v", err)
	}
	if _, err := os.Stat(m.path("d", "control")); err == nil {
		t.Error("a file created after the last fsync survived the shutdown: the shutdown did not drop uncommitted changes")
	}
}

// SEEK_DATA and SEEK_HOLE right after a buffered write, with no fsync: the
// data is still in the kernel's page cache and must be found.
func TestSeekAfterBufferedWrite(t *testing.T) {
	requireEnv(t)
	needTool(t, "xfs_io")
	// Large enough that opens get the writeback cache: nearly full, they
	// go write-through and the daemon sees every write at once.
	img := mkfs(t, "4G")
	m := mountImage(t, img)
	// The case from the report: a fresh file, one page, then seek.
	out := runCmd(t, "xfs_io", "-f", "-c", "pwrite -q 0 4k", "-c", "seek -d 0", m.path("f"))
	if !strings.Contains(out, "DATA\t0") {
		t.Errorf("SEEK_DATA after a buffered write to a new file:\n%s\nwant DATA at 0", out)
	}
	// A file with durable data at the start, then a buffered write past a
	// hole: the second extent is found, and the hole between stays one.
	sh(t, "head -c 4096 /dev/urandom > "+m.path("g")+" && sync "+m.path("g"))
	out = runCmd(t, "xfs_io", "-c", "pwrite -q 1m 4k", "-c", "seek -a -r 0", m.path("g"))
	for _, want := range []string{"DATA\t0", "HOLE\t4096", "DATA\t1048576", "HOLE\t1052672"} {
		if !strings.Contains(out, want) {
			t.Errorf("seek -a -r 0 after a buffered write at 1 MiB:\n%s\nwant %q", out, want)
		}
	}
}

// Buffered readers never see data older than a completed AIO O_DIRECT
// write (generic/451), under the atime modes that keep the page cache
// across opens; strictatime never kept it.
func TestDirectWriteDropsCachedPages(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	for _, atime := range []string{"noatime", "relatime"} {
		t.Run(atime, func(t *testing.T) {
			m := mountImage(t, img, atime)
			runProg(t, "dio_stale", m.path("f-"+atime), "1000")
			m.unmount(t)
		})
	}
}

// A write-protected device mounts read-only with one log line instead of
// failing at its first write (generic/050): a loop device set read-only,
// with a journal to replay, then -o ro,norecovery; and an image on a
// read-only mount.
func TestWriteProtectedDevice(t *testing.T) {
	requireEnv(t)
	needTool(t, "blockdev")
	backing := filepath.Join(t.TempDir(), "loop.img")
	if err := os.WriteFile(backing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, 256<<20); err != nil {
		t.Fatal(err)
	}
	out, err := tryCmd("losetup", "--find", "--show", backing)
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(out)
	t.Cleanup(func() {
		_, _ = tryCmd("blockdev", "--setrw", dev)
		if out, err := tryCmd("losetup", "-d", dev); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	streamfs(t, "mkfs", dev)
	m := mountImage(t, dev, "commit=3600")
	writeFile(t, m.path("kept"), []byte("replayed\n"), 0o644)
	// A crash leaves the fsync'd file in the journal only.
	m.kill(t)

	runCmd(t, "blockdev", "--setro", dev)
	m = mountImage(t, dev)
	if !m.logShows("write-protected, mounting read-only") {
		t.Errorf("no write-protected log line:\n%s", m.log.String())
	}
	if !mountIsRO(t, m.dir) {
		t.Error("the mount of a read-only device is not read-only in /proc/self/mounts")
	}
	checkContent(t, m.path("kept"), []byte("replayed\n"))
	if err := os.WriteFile(m.path("new"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on a write-protected device: %v, want EROFS", err)
	}
	m.unmount(t)
	if strings.Contains(m.log.String(), "shut down") {
		t.Errorf("the filesystem shut down:\n%s", m.log.String())
	}

	m = mountImage(t, dev, "ro", "norecovery")
	if _, err := os.ReadDir(m.dir); err != nil {
		t.Errorf("readdir of a norecovery mount: %v", err)
	}
	m.unmount(t)

	// An image that cannot be opened for writing: on a read-only bind mount.
	img := mkfs(t, "128M")
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "mount", "--bind", filepath.Dir(img), ro)
	t.Cleanup(func() { _, _ = tryCmd("umount", ro) })
	runCmd(t, "mount", "-o", "remount,bind,ro", ro)
	m = mountImage(t, filepath.Join(ro, filepath.Base(img)))
	if !m.logShows("write-protected, mounting read-only") || !mountIsRO(t, m.dir) {
		t.Errorf("an image on a read-only mount was not mounted read-only:\n%s", m.log.String())
	}
	m.unmount(t)
}

// mountIsRO reports whether the mount at dir has the ro flag.
func mountIsRO(t *testing.T, dir string) bool {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && unescapeMount(f[1]) == dir {
			for _, o := range strings.Split(f[3], ",") {
				if o == "ro" {
					return true
				}
			}
			return false
		}
	}
	t.Fatalf("%s is not mounted", dir)
	return false
}

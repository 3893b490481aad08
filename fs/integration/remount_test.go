package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/ioctl"
)

// TestRemountManifest builds a tree with every kind of metadata, unmounts,
// remounts and checks that a full manifest (lstat, xattrs, content, stream)
// is identical.
func TestRemountManifest(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	// noatime: the manifest reads every file, which under relatime would
	// (rightly) move the atimes it compares.
	m := mountImage(t, img, "noatime")

	// Regular files with data, modes and owners.
	for i, mode := range []string{"644", "600", "755", "4755", "2750", "1777", "000"} {
		p := m.path(fmt.Sprintf("file%d", i))
		writeFile(t, p, randBytes(int64(100+i), i*70001+13), 0o644)
		runCmd(t, "chmod", mode, p)
	}
	runCmd(t, "chown", "1234:5678", m.path("file1"))
	runCmd(t, "chown", "1234:5678", m.path("file3"))

	// Times with nanoseconds.
	at := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	mt := time.Date(2002, 3, 4, 5, 6, 7, 987654321, time.UTC)
	if err := os.Chtimes(m.path("file0"), at, mt); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "touch", "-d", "1999-12-31 23:59:59.000000001 UTC", m.path("file2"))

	// user.* xattrs, including an empty value and a binary one.
	setx := func(p, name string, v []byte) {
		t.Helper()
		if err := unix.Lsetxattr(p, name, v, 0); err != nil {
			t.Fatalf("setxattr %s %s: %v", p, name, err)
		}
	}
	setx(m.path("file0"), "user.comment", []byte("hello"))
	setx(m.path("file0"), "user.empty", nil)
	setx(m.path("file0"), "user.binary", randBytes(7, 3000))
	setx(m.path("file1"), "user.x", []byte("y"))
	if err := os.Mkdir(m.path("xdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	setx(m.path("xdir"), "user.on.dir", []byte("dir value"))
	setx(m.path("xdir"), "user.removed", []byte("gone"))
	if err := unix.Removexattr(m.path("xdir"), "user.removed"); err != nil {
		t.Fatal(err)
	}
	setx(m.path("file1"), "user.x", []byte("replaced"))

	// Hard links within and across directories.
	if err := os.Mkdir(m.path("links"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{m.path("file0.link"), m.path("links", "file0")} {
		if err := os.Link(m.path("file0"), l); err != nil {
			t.Fatal(err)
		}
	}
	// Symlinks: relative, absolute, dangling, long target, with an owner.
	long := strings.Repeat("x/", 1000) + "end"
	for name, target := range map[string]string{"sym.rel": "file0", "sym.abs": "/etc/passwd", "sym.dangling": "nowhere", "sym.long": long} {
		if err := os.Symlink(target, m.path(name)); err != nil {
			t.Fatal(err)
		}
	}
	runCmd(t, "chown", "-h", "1234:5678", m.path("sym.rel"))

	// A sparse file: data at 0, at 100 MiB and a hole up to 200 MiB.
	sp, err := os.Create(m.path("sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.WriteAt(randBytes(9, 8192), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.WriteAt(randBytes(10, 4096), 100<<20); err != nil {
		t.Fatal(err)
	}
	if err := sp.Truncate(200 << 20); err != nil {
		t.Fatal(err)
	}
	sp.Close()

	// An empty directory with an unusual mode and owner; a nested one.
	if err := os.MkdirAll(m.path("empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "chown", "1234:5678", m.path("empty"))
	if err := os.MkdirAll(m.path("d1", "d2", "d3"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An empty file, a FIFO.
	writeFile(t, m.path("d1", "d2", "d3", "emptyfile"), nil, 0o640)
	if err := syscall.Mkfifo(m.path("d1", "fifo"), 0o620); err != nil {
		t.Fatal(err)
	}

	// A file with a stream, and a directory with a stream whose new files
	// inherit it.
	writeFile(t, m.path("streamed"), randBytes(11, 50000), 0o644)
	streamfs(t, "stream", "set", m.path("streamed"), "3")
	if err := os.Mkdir(m.path("sdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	streamfs(t, "stream", "set", m.path("sdir"), "2")
	writeFile(t, m.path("sdir", "inherited"), randBytes(12, 123457), 0o644)

	before := manifest(t, m.dir)
	for _, want := range []string{"streamed", "sdir", "sdir/inherited"} {
		if !strings.Contains(before[want], "stream=") || strings.Contains(before[want], "stream=0 ") {
			t.Errorf("%s has no stream before the remount: %s", want, before[want])
		}
	}
	m = m.remount(t)
	compareMaps(t, "manifest after remount", before, manifest(t, m.dir))
	// And once more, after a remount that changed nothing.
	m = m.remount(t)
	compareMaps(t, "manifest after second remount", before, manifest(t, m.dir))

	// Read-only: the same manifest, and every change fails with EROFS.
	m.unmount(t)
	m = mountAt(t, img, m.dir, "ro")
	compareMaps(t, "manifest of a read-only mount", before, manifest(t, m.dir))
	if err := os.WriteFile(m.path("new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("creating a file on a read-only mount: %v, want EROFS", err)
	}
	if _, err := os.OpenFile(m.path("file0"), os.O_WRONLY, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("opening a file for writing on a read-only mount: %v, want EROFS", err)
	}
	if err := os.Remove(m.path("file0")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("unlink on a read-only mount: %v, want EROFS", err)
	}
	if err := unix.Setxattr(m.path("file0"), "user.new", []byte("v"), 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("setxattr on a read-only mount: %v, want EROFS", err)
	}
	m.unmount(t)
	m = mountAt(t, img, m.dir, "noatime")
	compareMaps(t, "manifest after the read-only mount", before, manifest(t, m.dir))
}

// manifest describes every entry under root: type, mode, owner, size,
// blocks, links, inode number, times in nanoseconds, xattrs, content hash or
// symlink target, and the write stream of files and directories.
func manifest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "mode=%o uid=%d gid=%d size=%d blocks=%d nlink=%d ino=%d atime=%d mtime=%d ctime=%d",
			st.Mode, st.Uid, st.Gid, st.Size, st.Blocks, st.Nlink, st.Ino,
			st.Atim.Nano(), st.Mtim.Nano(), st.Ctim.Nano())
		b.WriteString(" xattrs=" + xattrList(t, p))
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			sum, err := fileSHA(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " stream=%d sha=%s", streamOf(t, p), sum)
		case syscall.S_IFDIR:
			fmt.Fprintf(&b, " stream=%d ", streamOf(t, p))
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			b.WriteString(" target=" + target)
		}
		out[rel] = b.String()
		return nil
	})
	if err != nil {
		t.Fatalf("manifest of %s: %v", root, err)
	}
	return out
}

// xattrList returns "name=hex,..." of every xattr, sorted.
func xattrList(t *testing.T, p string) string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", p, err)
	}
	var names []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		v := make([]byte, 64<<10)
		vn, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", p, name, err)
		}
		parts = append(parts, fmt.Sprintf("%s=%x", name, v[:vn]))
	}
	return strings.Join(parts, ",")
}

// streamOf returns the write stream of a file or directory via the ioctl.
func streamOf(t *testing.T, p string) uint32 {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer f.Close()
	id, err := ioctl.Get(f.Fd())
	if err != nil {
		t.Fatalf("FS_IOC_WRITE_STREAM GET on %s: %v", p, err)
	}
	return id
}

package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCoreutils drives the namespace and attribute operations with the
// ordinary coreutils and checks the results with stat(2) and readlink(2).
func TestCoreutils(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	m := mountImage(t, img)
	free0 := statfs(t, m.dir).Bfree
	src := filepath.Join(t.TempDir(), "src")
	data := randBytes(1, 3<<20+17)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// mkdir -p
	deep := m.path("a", "b", "c")
	runCmd(t, "mkdir", "-p", deep)
	for _, d := range []string{m.path("a"), m.path("a", "b"), deep} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Fatalf("mkdir -p: %s: %v %v", d, fi, err)
		}
	}

	// cp, cp -p
	f := filepath.Join(deep, "f")
	runCmd(t, "cp", src, f)
	checkContent(t, f, data)
	old := time.Date(2003, 4, 5, 6, 7, 8, 0, time.UTC)
	if err := os.Chtimes(src, old, old); err != nil {
		t.Fatal(err)
	}
	fp := filepath.Join(deep, "fp")
	runCmd(t, "cp", "-p", src, fp)
	checkContent(t, fp, data)
	if fi, err := os.Stat(fp); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(old) {
		t.Errorf("cp -p: mode %v mtime %v, want -rw------- %v", fi.Mode(), fi.ModTime(), old)
	}

	// mv (within a directory and across directories)
	g := m.path("a", "g")
	runCmd(t, "mv", f, g)
	if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("mv: %s still there: %v", f, err)
	}
	checkContent(t, g, data)
	runCmd(t, "mv", fp, filepath.Join(deep, "fp2"))
	checkContent(t, filepath.Join(deep, "fp2"), data)

	// ln (hard link)
	h := m.path("a", "h")
	runCmd(t, "ln", g, h)
	gs, hs := lstatT(t, g), lstatT(t, h)
	if gs.Ino != hs.Ino || gs.Nlink != 2 || hs.Nlink != 2 {
		t.Errorf("ln: inodes %d/%d nlink %d/%d, want the same inode with nlink 2", gs.Ino, hs.Ino, gs.Nlink, hs.Nlink)
	}
	checkContent(t, h, data)

	// ln -s (relative and absolute), and a dangling one
	s := m.path("a", "s")
	runCmd(t, "ln", "-s", "g", s)
	if target, err := os.Readlink(s); err != nil || target != "g" {
		t.Errorf("readlink %s = %q, %v; want g", s, target, err)
	}
	if fi, err := os.Lstat(s); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("lstat %s: %v %v, want a symlink", s, fi, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(s, &st); err != nil || st.Ino != gs.Ino {
		t.Errorf("stat through symlink: ino %d, %v; want %d", st.Ino, err, gs.Ino)
	}
	abs := m.path("abs")
	runCmd(t, "ln", "-s", deep, abs)
	if target, _ := os.Readlink(abs); target != deep {
		t.Errorf("readlink %s = %q, want %q", abs, target, deep)
	}
	dangling := m.path("dangling")
	runCmd(t, "ln", "-s", "no/such/target", dangling)
	if _, err := os.Stat(dangling); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of a dangling symlink: %v, want ENOENT", err)
	}

	// chmod, chown
	runCmd(t, "chmod", "640", g)
	if fi, _ := os.Stat(g); fi.Mode().Perm() != 0o640 {
		t.Errorf("chmod 640: mode %v", fi.Mode())
	}
	runCmd(t, "chmod", "u+s,g+s,+t", g)
	if fi, _ := os.Stat(g); fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != os.ModeSetuid|os.ModeSetgid|os.ModeSticky {
		t.Errorf("chmod u+s,g+s,+t: mode %v", fi.Mode())
	}
	runCmd(t, "chmod", "0644", g)
	runCmd(t, "chown", "1234:5678", g)
	if st := lstatT(t, g); st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("chown 1234:5678: uid %d gid %d", st.Uid, st.Gid)
	}
	runCmd(t, "chown", "-h", "42:43", s)
	if st := lstatT(t, s); st.Uid != 42 || st.Gid != 43 {
		t.Errorf("chown -h on a symlink: uid %d gid %d", st.Uid, st.Gid)
	}
	runCmd(t, "chown", "-R", "7:8", m.path("a", "b"))
	for _, p := range []string{m.path("a", "b"), deep, filepath.Join(deep, "fp2")} {
		if st := lstatT(t, p); st.Uid != 7 || st.Gid != 8 {
			t.Errorf("chown -R: %s uid %d gid %d", p, st.Uid, st.Gid)
		}
	}

	// touch -d with nanoseconds, touch -a / -m separately, touch creating
	when := "2001-02-03 04:05:06.123456789 UTC"
	want := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	runCmd(t, "touch", "-d", when, g)
	st = lstatT(t, g)
	if got := time.Unix(st.Mtim.Unix()); !got.Equal(want) {
		t.Errorf("touch -d: mtime %v, want %v", got, want)
	}
	if got := time.Unix(st.Atim.Unix()); !got.Equal(want) {
		t.Errorf("touch -d: atime %v, want %v", got, want)
	}
	runCmd(t, "touch", "-m", "-d", "2010-01-01 00:00:00 UTC", g)
	st = lstatT(t, g)
	if got := time.Unix(st.Atim.Unix()); !got.Equal(want) {
		t.Errorf("touch -m changed atime to %v", got)
	}
	if got := time.Unix(st.Mtim.Unix()); !got.Equal(time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("touch -m: mtime %v", got)
	}
	newFile := m.path("touched")
	runCmd(t, "touch", newFile)
	if fi, err := os.Stat(newFile); err != nil || fi.Size() != 0 || !fi.Mode().IsRegular() {
		t.Errorf("touch: %v %v", fi, err)
	}

	// stat(1) agrees with stat(2)
	out := strings.Fields(runCmd(t, "stat", "-c", "%s %a %u %g %h %i %F", g))
	st = lstatT(t, g)
	wantFields := []string{itoa(st.Size), "644", "1234", "5678", "2", itoa(int64(st.Ino)), "regular"}
	if len(out) < len(wantFields) {
		t.Fatalf("stat -c: %q", out)
	}
	for i, w := range wantFields {
		if out[i] != w {
			t.Errorf("stat -c field %d = %q, want %q (all: %q)", i, out[i], w, out)
		}
	}

	// truncate: grow (sparse), shrink, grow again (must read zeros)
	runCmd(t, "truncate", "-s", "10M", g)
	if fi, _ := os.Stat(g); fi.Size() != 10<<20 {
		t.Errorf("truncate -s 10M: size %d", fi.Size())
	}
	grown, _ := os.ReadFile(g)
	if len(grown) != 10<<20 || string(grown[:len(data)]) != string(data) || !allZero(grown[len(data):]) {
		t.Errorf("truncate -s 10M: old data changed or the new tail is not zero")
	}
	runCmd(t, "truncate", "-s", "100", g)
	checkContent(t, h, data[:100])
	runCmd(t, "truncate", "-s", "8192", g)
	grown, _ = os.ReadFile(g)
	if len(grown) != 8192 || string(grown[:100]) != string(data[:100]) || !allZero(grown[100:]) {
		t.Errorf("truncate shrink then grow: stale bytes past the old end")
	}

	// dd: a full copy with fsync, then an in-place block overwrite
	d := m.path("dd.out")
	runCmd(t, "dd", "if="+src, "of="+d, "bs=64k", "conv=fsync", "status=none")
	checkContent(t, d, data)
	runCmd(t, "dd", "if=/dev/zero", "of="+d, "bs=4k", "seek=10", "count=1", "conv=notrunc,fsync", "status=none")
	patched := append([]byte(nil), data...)
	copy(patched[10*4096:11*4096], make([]byte, 4096))
	checkContent(t, d, patched)
	runCmd(t, "dd", "if="+d, "of="+filepath.Join(t.TempDir(), "back"), "bs=1M", "iflag=direct", "status=none")

	// cp of a sparse file (coreutils uses SEEK_DATA/SEEK_HOLE): same
	// bytes, and the copy stays sparse.
	sparse := m.path("sparse")
	sf, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 5 << 20, 63<<20 + 100} {
		if _, err := sf.WriteAt(randBytes(off, 4096), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := sf.Truncate(80 << 20); err != nil {
		t.Fatal(err)
	}
	sf.Close()
	sparseData, _ := os.ReadFile(sparse)
	for _, dst := range []string{m.path("sparse.copy"), filepath.Join(t.TempDir(), "sparse.out")} {
		runCmd(t, "cp", "--sparse=always", sparse, dst)
		checkContent(t, dst, sparseData)
		if st := lstatT(t, dst); st.Blocks*512 > 1<<20 {
			t.Errorf("cp --sparse=always to %s: %d bytes allocated for 12 KiB of data", dst, st.Blocks*512)
		}
	}
	if st := lstatT(t, sparse); st.Blocks*512 > 1<<20 {
		t.Errorf("%s: %d bytes allocated for 12 KiB of data", sparse, st.Blocks*512)
	}
	runCmd(t, "rm", sparse, m.path("sparse.copy"))

	// A directory with many entries: ls lists them all, rm -r removes them.
	many := m.path("many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	const nMany = 3000
	for i := 0; i < nMany; i++ {
		f, err := os.Create(filepath.Join(many, fmt.Sprintf("entry-with-a-longer-name-%05d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if n := len(strings.Fields(runCmd(t, "ls", many))); n != nMany {
		t.Errorf("ls of a directory of %d files: %d names", nMany, n)
	}
	runCmd(t, "rm", "-r", many)

	// ls sees every name
	ls := runCmd(t, "ls", "-la", m.path("a"))
	for _, name := range []string{" g\n", " h\n", " s -> g\n", " b\n"} {
		if !strings.Contains(ls, name) {
			t.Errorf("ls -la %s: no %q in\n%s", m.path("a"), strings.TrimSpace(name), ls)
		}
	}
	if n := len(strings.Fields(runCmd(t, "ls", "-A", m.dir))); n != 5 {
		t.Errorf("ls -A of the root: %d names, want 5", n)
	}

	// rmdir of a non-empty directory fails, rm -r removes everything
	if out, err := tryCmd("rmdir", m.path("a")); err == nil {
		t.Errorf("rmdir of a non-empty directory succeeded: %s", out)
	}
	runCmd(t, "rm", "-r", m.path("a"))
	if _, err := os.Lstat(m.path("a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rm -r: %v", err)
	}
	runCmd(t, "rm", "-f", d, abs, dangling, newFile)
	if names, err := os.ReadDir(m.dir); err != nil || len(names) != 0 {
		t.Errorf("root after rm: %v %v", names, err)
	}
	// Everything was freed: the filesystem is back to its initial usage.
	// Everything was freed but the metadata trees, which may keep a few
	// more nodes than a fresh filesystem.
	if free := statfs(t, m.dir).Bfree; !nearlyFree(free, free0) {
		t.Errorf("free blocks after removing everything: %d, at mount %d", free, free0)
	}
	m = m.remount(t)
	if names, err := os.ReadDir(m.dir); err != nil || len(names) != 0 {
		t.Errorf("root after remount: %v %v", names, err)
	}
	if free := statfs(t, m.dir).Bfree; !nearlyFree(free, free0) {
		t.Errorf("free blocks after remount: %d, at first mount %d", free, free0)
	}
}

func lstatT(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

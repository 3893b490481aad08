package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel caches names, attributes and negative lookups for long
// (streamfs is the only writer of its device). These tests check that it
// still sees every change at once, and count the FUSE requests that the
// caching and READDIRPLUS save, from the daemon's own counters.

// fuseOps returns the daemon's FUSE request counts by opcode.
func fuseOps(t *testing.T, m *mount) map[string]uint64 {
	t.Helper()
	var doc struct {
		FuseOps map[string]uint64 `json:"fuse_ops"`
	}
	if err := json.Unmarshal([]byte(streamfs(t, "stats", "--json", m.dir)), &doc); err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	return doc.FuseOps
}

// opsDelta runs f and returns how many requests of each kind it caused.
func opsDelta(t *testing.T, m *mount, f func()) map[string]uint64 {
	t.Helper()
	before := fuseOps(t, m)
	f()
	after := fuseOps(t, m)
	d := map[string]uint64{}
	for k, v := range after {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// makeFiles creates n empty files d/f0000... with xargs touch.
func makeFiles(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sh(t, fmt.Sprintf("cd %s && seq -f 'f%%05g' 1 %d | xargs touch", dir, n))
}

// `find` and `ls -lR` over a directory the kernel has never seen cost no
// LOOKUP and no GETATTR per entry: READDIRPLUS brings names and attributes
// in one go, and the long timeouts keep them.
func TestReaddirplusNoLookupPerEntry(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	const n = 3000
	makeFiles(t, m.path("d"), n)
	if err := os.Mkdir(m.path("d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	makeFiles(t, m.path("d", "sub"), 100)
	m = m.remount(t) // a cold kernel cache
	d := opsDelta(t, m, func() {
		out := runCmd(t, "find", m.path("d"))
		if got := strings.Count(out, "\n"); got != n+100+2 {
			t.Errorf("find listed %d names, want %d", got, n+100+2)
		}
		out = runCmd(t, "ls", "-lR", m.path("d"))
		if got := strings.Count(out, " f0"); got != n+100 {
			t.Errorf("ls -lR listed %d files, want %d", got, n+100)
		}
	})
	t.Logf("find + ls -lR over %d files: %v", n+100, d)
	if d["READDIRPLUS"] == 0 {
		t.Errorf("no READDIRPLUS: %v", d)
	}
	// A handful for the path itself, never one per entry.
	for _, op := range []string{"LOOKUP", "GETATTR"} {
		if d[op] > 10 {
			t.Errorf("%d %s requests for %d entries: %v", d[op], op, n+100, d)
		}
	}
	// Once a listing has filled the kernel's directory cache (the first
	// one, which updated atime, could not), the next costs no READDIR.
	runCmd(t, "find", m.path("d"))
	d = opsDelta(t, m, func() { runCmd(t, "find", m.path("d")) })
	if d["READDIRPLUS"]+d["READDIR"]+d["LOOKUP"] != 0 {
		t.Errorf("second find asked the daemon: %v", d)
	}
}

// A create costs no more round trips than the kernel insists on, and no
// close sends FLUSH (the daemon declines the first one for good; the
// kernel itself reports write errors at close).
func TestCreateAndCloseRoundTrips(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 200
	d := opsDelta(t, m, func() { makeFiles(t, m.path("d"), n) })
	t.Logf("%d creates by touch: %v", n, d)
	if d["CREATE"] != n {
		t.Errorf("%d CREATE for %d files: %v", d["CREATE"], n, d)
	}
	// CREATE returns the entry and its attributes: no LOOKUP after it
	// (one negative lookup per name is the kernel's, before it).
	if d["LOOKUP"] > n+2 {
		t.Errorf("%d LOOKUP for %d creates: %v", d["LOOKUP"], n, d)
	}
	// touch closes every file it creates: at most the first close of the
	// mount asks for FLUSH.
	if d["FLUSH"] > 1 {
		t.Errorf("%d FLUSH for %d creates: %v", d["FLUSH"], n, d)
	}
	d = opsDelta(t, m, func() {
		for i := 1; i <= n; i++ {
			f, err := os.Open(m.path("d", fmt.Sprintf("f%05d", i)))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	})
	// With the writeback cache the kernel would send FLUSH at every close
	// (FOPEN_NOFLUSH is ignored in that mode), but the daemon declined it.
	if d["FLUSH"] != 0 || d["LOOKUP"] != 0 || d["GETATTR"] > 2 {
		t.Errorf("read-only open+close of %d cached names: %v; want no LOOKUP or GETATTR per file", n, d)
	}
	d = opsDelta(t, m, func() {
		f, err := os.OpenFile(m.path("d", "f00001"), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
	if d["FLUSH"] != 0 {
		t.Errorf("write open+close: %v, want no FLUSH", d)
	}
}

// Negative lookups are cached for long, and yet a name that appears —
// by create, link, rename, mknod, mkdir or symlink — is found at once.
func TestNegativeEntriesAndNewNames(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	writeFile(t, m.path("src"), []byte("x"), 0o644)
	writeFile(t, m.path("mv"), []byte("y"), 0o644)
	mk := map[string]func(p string) error{
		"create":  func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"link":    func(p string) error { return os.Link(m.path("src"), p) },
		"rename":  func(p string) error { return os.Rename(m.path("mv"), p) },
		"mknod":   func(p string) error { return syscall.Mknod(p, syscall.S_IFIFO|0o644, 0) },
		"mkdir":   func(p string) error { return os.Mkdir(p, 0o755) },
		"symlink": func(p string) error { return os.Symlink("src", p) },
	}
	for how, f := range mk {
		p := m.path("new-" + how)
		for i := 0; i < 2; i++ {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s before: %v", how, err)
			}
		}
		// The second miss came from the kernel's negative entry.
		d := opsDelta(t, m, func() { _, _ = os.Lstat(p) })
		if d["LOOKUP"] != 0 {
			t.Errorf("%s: a repeated miss asked the daemon: %v", how, d)
		}
		if err := f(p); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: new name not visible: %v", how, err)
		}
	}
	// And names that go away are gone at once, under every name.
	if _, err := os.Stat(m.path("mv")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rename source still visible: %v", err)
	}
	if err := os.Remove(m.path("new-create")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.path("new-create")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed name still visible: %v", err)
	}
}

// stat returns the kernel's view of p.
func statOf(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// Attributes cached for an hour still change at once: through another
// hard link, for the directory an entry was added to, and when the
// daemon itself changes them (a stream set by ioctl moves ctime; the
// kernel does not know that ioctl's meaning).
func TestAttributesCoherent(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	a, b := m.path("a"), m.path("b")
	writeFile(t, a, []byte("hello"), 0o644)
	if err := os.Link(a, b); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, a); st.Nlink != 2 {
		t.Errorf("nlink after link: %d, want 2", st.Nlink)
	}
	if err := os.Chmod(b, 0o600); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, a); st.Mode&0o777 != 0o600 {
		t.Errorf("mode through the other link: %o, want 600", st.Mode&0o777)
	}
	// Written through one name, seen through the other.
	if err := os.WriteFile(b, []byte("hello, world"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, a); st.Size != 12 {
		t.Errorf("size through the other link: %d, want 12", st.Size)
	}
	checkContent(t, a, []byte("hello, world"))
	// Renamed over: the old inode loses a link at once.
	writeFile(t, m.path("c"), []byte("c"), 0o644)
	if err := os.Rename(m.path("c"), b); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, a); st.Nlink != 1 {
		t.Errorf("nlink after rename over the other link: %d, want 1", st.Nlink)
	}
	// Directory link counts and times.
	dir0 := statOf(t, m.dir)
	if err := os.Mkdir(m.path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.dir); st.Nlink != dir0.Nlink+1 {
		t.Errorf("parent nlink after mkdir: %d, want %d", st.Nlink, dir0.Nlink+1)
	}
	// An xattr moves ctime. The kernel stamps regular files itself under
	// the writeback cache, with its coarse clock: let it tick first.
	time.Sleep(20 * time.Millisecond)
	before := statOf(t, a)
	if err := unix.Setxattr(a, "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, a); st.Ctim == before.Ctim {
		t.Errorf("ctime unchanged by setxattr")
	}
	// A stream set by ioctl on a directory moves its ctime; only the daemon
	// knows. (A regular file's times belong to the kernel under the
	// writeback cache, so its ctime stays.)
	streamfs(t, "stream", "set", a, "1")
	before = statOf(t, m.path("sub"))
	streamfs(t, "stream", "set", m.path("sub"), "1")
	if st := statOf(t, m.path("sub")); st.Ctim == before.Ctim {
		t.Errorf("directory ctime unchanged after a stream was set (the kernel was not told)")
	}
}

// Listings reflect creates and removals at once, although the kernel
// keeps directory contents in its cache.
func TestDirectoryCacheCoherent(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	d := m.path("d")
	makeFiles(t, d, 50)
	names := func() map[string]bool {
		t.Helper()
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		s := map[string]bool{}
		for _, e := range ents {
			s[e.Name()] = true
		}
		return s
	}
	for i := 0; i < 2; i++ { // the second listing may come from the cache
		if got := len(names()); got != 50 {
			t.Fatalf("listing %d: %d names, want 50", i, got)
		}
	}
	writeFile(t, filepath.Join(d, "new"), nil, 0o644)
	if err := os.Remove(filepath.Join(d, "f00007")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(d, "f00008"), m.path("out")); err != nil {
		t.Fatal(err)
	}
	s := names()
	if !s["new"] || s["f00007"] || s["f00008"] || len(s) != 49 {
		t.Errorf("listing after create, unlink, rename: %d names, new %v, f00007 %v, f00008 %v", len(s), s["new"], s["f00007"], s["f00008"])
	}
}

// getdentsAll reads the directory open at fd from its current position,
// in small reads, and returns names and their d_off cookies.
func getdentsAll(t *testing.T, fd int) (names []string, offs []int64) {
	t.Helper()
	buf := make([]byte, 1024) // a handful of entries a call: many READDIRs
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return names, offs
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(b[16]) | int(b[17])<<8
			off := int64(uint64(b[8]) | uint64(b[9])<<8 | uint64(b[10])<<16 | uint64(b[11])<<24 |
				uint64(b[12])<<32 | uint64(b[13])<<40 | uint64(b[14])<<48 | uint64(b[15])<<56)
			name := b[19:reclen]
			if i := strings.IndexByte(string(name), 0); i >= 0 {
				name = name[:i]
			}
			names = append(names, string(name))
			offs = append(offs, off)
			b = b[reclen:]
		}
	}
}

// A directory larger than one store batch streams in position order:
// every name once, telldir cookies (d_off) that seekdir can return to,
// and names created or removed during a listing do not disturb the others.
func TestReaddirSeekAndStream(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	d := m.path("big")
	const n = 2500 // several batches of 512
	makeFiles(t, d, n)
	m = m.remount(t)
	open := func() int {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	fd := open()
	defer unix.Close(fd)
	names, offs := getdentsAll(t, fd)
	if len(names) != n+2 || names[0] != "." || names[1] != ".." {
		t.Fatalf("listing: %d names (first %q), want %d starting with . and ..", len(names), names[:2], n+2)
	}
	seen := map[string]bool{}
	for _, nm := range names {
		if seen[nm] {
			t.Errorf("%q listed twice", nm)
		}
		seen[nm] = true
	}
	// seekdir to each of a spread of cookies resumes right after that entry.
	for _, i := range []int{0, 1, 2, 511, 512, 513, 1500, n} {
		if _, err := unix.Seek(fd, offs[i], 0); err != nil {
			t.Fatalf("seek to cookie %d: %v", offs[i], err)
		}
		rest, _ := getdentsAll(t, fd)
		if want := len(names) - i - 1; len(rest) != want {
			t.Errorf("after cookie of entry %d: %d names, want %d", i, len(rest), want)
		} else if want > 0 && rest[0] != names[i+1] {
			t.Errorf("after cookie of entry %d: %q, want %q", i, rest[0], names[i+1])
		}
	}
	// Changes mid-listing: a second handle reads half, the directory
	// changes, it reads the rest. Untouched names appear exactly once.
	fd2 := open()
	defer unix.Close(fd2)
	buf := make([]byte, 8192)
	got := map[string]int{}
	for len(got) < n/2 {
		c, err := unix.Getdents(fd2, buf)
		if err != nil || c == 0 {
			t.Fatalf("getdents: %d %v", c, err)
		}
		_, _, nm := unix.ParseDirent(buf[:c], -1, nil)
		for _, x := range nm {
			got[x]++
		}
	}
	for i := 1; i <= 100; i++ {
		writeFile(t, filepath.Join(d, "new"+strconv.Itoa(i)), nil, 0o644)
		if err := os.Remove(filepath.Join(d, fmt.Sprintf("f%05d", n+1-i))); err != nil {
			t.Fatal(err)
		}
	}
	for {
		c, err := unix.Getdents(fd2, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if c == 0 {
			break
		}
		_, _, nm := unix.ParseDirent(buf[:c], -1, nil)
		for _, x := range nm {
			got[x]++
		}
	}
	for i := 1; i <= n-100; i++ {
		if nm := fmt.Sprintf("f%05d", i); got[nm] != 1 {
			t.Errorf("%s listed %d times across a concurrent change, want once", nm, got[nm])
		}
	}
}

// Sequential buffered reads go to the daemon in large requests: the mount
// raises the kernel's read-ahead window, and max_pages allows 1 MiB.
func TestReadaheadRequestSize(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "512M"))
	const size = 64 << 20
	sh(t, fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d oflag=direct status=none", m.path("f"), size>>20))
	m = m.remount(t) // nothing cached
	var st unix.Stat_t
	if err := unix.Stat(m.dir, &st); err != nil {
		t.Fatal(err)
	}
	// The daemon tunes the mount's bdi right after the mount goes live.
	kb := 0
	for i := 0; i < 50 && kb < 1024; i++ {
		ra, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
		if err != nil {
			t.Fatal(err)
		}
		if kb, _ = strconv.Atoi(strings.TrimSpace(string(ra))); kb < 1024 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if kb < 1024 {
		t.Errorf("read_ahead_kb %d, want at least 1024", kb)
	}
	d := opsDelta(t, m, func() {
		if out, err := exec.Command("dd", "if="+m.path("f"), "of=/dev/null", "bs=128k").CombinedOutput(); err != nil {
			t.Fatalf("dd: %v\n%s", err, out)
		}
	})
	// 64 MiB in 1 MiB requests is 64; at the kernel's default 128 KiB
	// window it would be 512.
	if d["READ"] == 0 || d["READ"] > 2*size/(1<<20) {
		t.Errorf("%d READ requests for %d MiB read sequentially: %v", d["READ"], size>>20, d)
	}
	// Reopened, the file is still in the page cache (FOPEN_KEEP_CACHE once
	// atime is fresh under relatime).
	d = opsDelta(t, m, func() {
		if _, err := os.ReadFile(m.path("f")); err != nil {
			t.Fatal(err)
		}
	})
	if d["READ"] != 0 {
		t.Errorf("re-reading a cached file: %d READ requests, want 0", d["READ"])
	}
	// Cached pages follow an O_DIRECT write through another descriptor.
	sh(t, fmt.Sprintf("dd if=/dev/urandom of=%s bs=4k count=1 seek=5 oflag=direct conv=notrunc status=none", m.path("f")))
	direct, err := os.OpenFile(m.path("f"), os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4096)
	if _, err := direct.ReadAt(want, 5*4096); err != nil {
		t.Fatal(err)
	}
	direct.Close()
	got, err := os.ReadFile(m.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got[5*4096:6*4096]) != string(want) {
		t.Errorf("buffered read after an O_DIRECT write shows stale data")
	}
}

// A listing in progress keeps a batch of entries between READDIRPLUS
// requests; a rename over one of its names in between must not make the
// kernel cache the name's old inode (kept alive by another link).
func TestReaddirplusAfterRenameOver(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	d := m.path("d")
	makeFiles(t, d, 400) // one store batch, many READDIRPLUS replies
	if err := os.Mkdir(m.path("other"), 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := getdentsAll(t, fd)
	unix.Close(fd)
	victim := names[2+300] // far past the first reply
	if err := os.Link(filepath.Join(d, victim), m.path("other", "keep")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("other", "z"), []byte("new"), 0o644)
	newIno := statOf(t, m.path("other", "z")).Ino

	fd, err = unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 512)
	if n, err := unix.Getdents(fd, buf); err != nil || n == 0 {
		t.Fatalf("getdents: %d %v", n, err)
	}
	if err := os.Rename(m.path("other", "z"), filepath.Join(d, victim)); err != nil {
		t.Fatal(err)
	}
	getdentsAll(t, fd)
	if got := statOf(t, filepath.Join(d, victim)).Ino; got != newIno {
		t.Errorf("%s after a rename over it during a listing: inode %d, want %d (the new file)", victim, got, newIno)
	}
	checkContent(t, filepath.Join(d, victim), []byte("new"))
}

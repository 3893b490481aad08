package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCrashFsync writes and fsyncs files, SIGKILLs the daemon, clears the
// dead mount, remounts and checks that every fsync'd byte is there and the
// mount replayed the journal.
func TestCrashFsync(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	// A long commit interval: only fsync makes anything durable, so the
	// remount has journal commits to replay.
	m := mountImage(t, img, "commit=3600")

	want := map[string][]byte{}
	if err := os.MkdirAll(m.path("d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 4095, 4096, 4097, 65536, 1<<20 + 3, 3 << 20, 100}
	for i, n := range sizes {
		rel := fmt.Sprintf("d/f%d", i)
		if i%2 == 1 {
			rel = fmt.Sprintf("d/sub/f%d", i)
		}
		data := randBytes(int64(1000+i), n)
		writeFile(t, m.path(rel), data, 0o644)
		want[rel] = data
	}

	// A file built by several writes, an overwrite and an extension, each
	// step fsync'd.
	f, err := os.Create(m.path("d", "grown"))
	if err != nil {
		t.Fatal(err)
	}
	grown := randBytes(2000, 2<<20)
	for off := 0; off < len(grown); off += 300000 {
		end := min(off+300000, len(grown))
		if _, err := f.WriteAt(grown[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	patch := randBytes(2001, 10000)
	copy(grown[12345:], patch)
	if _, err := f.WriteAt(patch, 12345); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want["d/grown"] = grown

	// A file renamed and then fsync'd, an fsync'd file truncated and
	// fsync'd again. The directory's fsync right after the file's commits
	// nothing new: the commits after it must still replay.
	writeFile(t, m.path("d", "tmp"), randBytes(3000, 5000), 0o644)
	if err := os.Rename(m.path("d", "tmp"), m.path("d", "renamed")); err != nil {
		t.Fatal(err)
	}
	syncPath(t, m.path("d", "renamed"))
	syncPath(t, m.path("d"))
	want["d/renamed"] = randBytes(3000, 5000)
	trunc := randBytes(3001, 200000)
	writeFile(t, m.path("d", "trunc"), trunc, 0o644)
	if err := os.Truncate(m.path("d", "trunc"), 7777); err != nil {
		t.Fatal(err)
	}
	syncPath(t, m.path("d", "trunc"))
	want["d/trunc"] = trunc[:7777]

	// A hard link, a removal and a rename over an existing name, made
	// durable by fsync of the directory.
	if err := os.Link(m.path("d", "f0"), m.path("d", "f0.link")); err != nil {
		t.Fatal(err)
	}
	want["d/f0.link"] = want["d/f0"]
	if err := os.Remove(m.path("d", "f2")); err != nil {
		t.Fatal(err)
	}
	delete(want, "d/f2")
	writeFile(t, m.path("d", "new-f4"), randBytes(3002, 70000), 0o644)
	if err := os.Rename(m.path("d", "new-f4"), m.path("d", "f4")); err != nil {
		t.Fatal(err)
	}
	want["d/f4"] = randBytes(3002, 70000)
	syncPath(t, m.path("d"))

	// Data that was never fsync'd: no promise, but it must not break the
	// replay.
	if err := os.WriteFile(m.path("d", "unsynced"), randBytes(4000, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	m.kill(t)
	m = mountAt(t, img, m.dir, "commit=3600")
	for rel, data := range want {
		checkContent(t, m.path(rel), data)
	}
	for _, gone := range []string{"d/f2", "d/new-f4", "d/tmp"} {
		if _, err := os.Lstat(m.path(gone)); err == nil {
			t.Errorf("%s is back after the crash", gone)
		}
	}
	if st := lstatT(t, m.path("d", "f0")); st.Nlink != 2 {
		t.Errorf("d/f0 has %d links after the crash, want 2", st.Nlink)
	}
	mounted := regexp.MustCompile(`"replayed_commits": (\d+)`).FindStringSubmatch(m.log.String())
	if mounted == nil {
		t.Errorf("the remount logged no replayed_commits:\n%s", m.log.String())
	} else if n, _ := strconv.Atoi(mounted[1]); n == 0 {
		t.Errorf("the remount after a crash replayed no commits:\n%s", m.log.String())
	}
	// The replayed filesystem is consistent: it unmounts cleanly, mounts
	// again without a replay, and the data is still there.
	m = m.remount(t)
	for rel, data := range want {
		checkContent(t, m.path(rel), data)
	}
	// And it takes new data.
	writeFile(t, m.path("d", "after"), randBytes(5000, 1<<20), 0o644)
	checkContent(t, m.path("d", "after"), randBytes(5000, 1<<20))
}

// TestCrashJournalWrap crashes twice: once after enough fsync'd commits to
// fill the journal several times over (checkpoints and wrap-around), and
// again after a replay, with more commits appended to the replayed journal.
func TestCrashJournalWrap(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "1G")
	m := mountImage(t, img, "commit=3600")
	info := streamfs(t, "info", "--json", img)
	var sb struct {
		JournalBlocks int `json:"journal_blocks"`
	}
	if err := json.Unmarshal([]byte(info), &sb); err != nil || sb.JournalBlocks == 0 {
		t.Fatalf("info --json: %v\n%s", err, info)
	}
	// Each fsync'd create commits at least two journal blocks.
	n := sb.JournalBlocks*3/4 + 100
	if err := os.Mkdir(m.path("many"), 0o755); err != nil {
		t.Fatal(err)
	}
	content := func(i int) []byte { return []byte(fmt.Sprintf("file %d\n", i)) }
	for i := 0; i < n; i++ {
		writeFile(t, m.path("many", strconv.Itoa(i)), content(i), 0o644)
		if i%3 == 0 && i > 0 {
			// Some removals too, so frees and reuse go through the journal.
			if err := os.Remove(m.path("many", strconv.Itoa(i-1))); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncPath(t, m.path("many"))
	check := func(m *mount, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			p := m.path("many", strconv.Itoa(i))
			if i%3 == 2 && i+1 < n {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was removed before the crash but is back", p)
				}
				continue
			}
			checkContent(t, p, content(i))
		}
	}
	m.kill(t)
	m = mountAt(t, img, m.dir, "commit=3600")
	check(m, n)

	// Second crash, right after the replay: the replayed journal must
	// take new commits where the replay left off.
	for i := n; i < n+300; i++ {
		writeFile(t, m.path("many", strconv.Itoa(i)), content(i), 0o644)
	}
	big := randBytes(77, 3<<20)
	writeFile(t, m.path("big"), big, 0o644)
	m.kill(t)
	m = mountAt(t, img, m.dir, "commit=3600")
	check(m, n)
	for i := n; i < n+300; i++ {
		checkContent(t, m.path("many", strconv.Itoa(i)), content(i))
	}
	checkContent(t, m.path("big"), big)
	m = m.remount(t)
	checkContent(t, m.path("big"), big)
	checkContent(t, m.path("many", strconv.Itoa(n+299)), content(n+299))
}

// TestWritebackCrash writes files with small buffered writes through the
// page cache (several at once, so writeback of different files overlaps),
// makes some durable with fsync, fdatasync and msync, SIGKILLs the daemon
// and checks that everything acknowledged survived.
func TestWritebackCrash(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G", "--ag-count", "8")
	m := mountImage(t, img, "commit=3600")
	for i := 0; i < 4; i++ {
		if err := os.Mkdir(m.path(fmt.Sprintf("d%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	type file struct {
		rel  string
		data []byte
		sync func(*os.File) error
	}
	fsync := func(f *os.File) error { return f.Sync() }
	fdatasync := func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
	var files []file
	for i := 0; i < 8; i++ {
		s := fsync
		if i%2 == 1 {
			s = fdatasync
		}
		files = append(files, file{fmt.Sprintf("d%d/f%d", i%4, i), randBytes(int64(100+i), 6<<20+i*4099), s})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(files))
	for _, fl := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(m.path(fl.rel))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			// 4 KiB writes, an overwrite of data already written back,
			// then the sync.
			for off := 0; off < len(fl.data); off += 4096 {
				if _, err := f.Write(fl.data[off:min(off+4096, len(fl.data))]); err != nil {
					errs <- err
					return
				}
				if off == 2<<20 {
					if err := f.Sync(); err != nil {
						errs <- err
						return
					}
					if _, err := f.WriteAt(fl.data[1000:70000], 1000); err != nil {
						errs <- err
						return
					}
				}
			}
			if err := fl.sync(f); err != nil {
				errs <- fmt.Errorf("sync %s: %w", fl.rel, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A mapping's stores, made durable by msync(MS_SYNC).
	mapped := randBytes(300, 1<<20)
	mf, err := os.Create(m.path("mapped"))
	if err != nil {
		t.Fatal(err)
	}
	if err := mf.Truncate(int64(len(mapped))); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(mf.Fd()), 0, len(mapped), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem, mapped)
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if err := mf.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = unix.Munmap(mem)
	mf.Close()

	// Dirty data nobody synced: no promise, but it must not break replay.
	junk, err := os.Create(m.path("d0", "unsynced"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := junk.Write(randBytes(400, 5<<20)); err != nil {
		t.Fatal(err)
	}

	m.kill(t)
	junk.Close()
	m = mountAt(t, img, m.dir, "commit=3600")
	for _, fl := range files {
		checkContent(t, m.path(fl.rel), fl.data)
	}
	checkContent(t, m.path("mapped"), mapped)
	// Whatever part of the unsynced file landed is its own data or zeros,
	// never another file's.
	if got, err := os.ReadFile(m.path("d0", "unsynced")); err == nil {
		want := randBytes(400, 5<<20)
		for off := 0; off < len(got); off += 4096 {
			end := min(off+4096, len(got))
			if !bytes.Equal(got[off:end], want[off:end]) && !allZero(got[off:end]) {
				t.Fatalf("unsynced file: block at %d is neither its data nor zeros", off)
			}
		}
	}
	m = m.remount(t)
	for _, fl := range files {
		checkContent(t, m.path(fl.rel), fl.data)
	}
}

// syncPath opens path read-only and fsyncs it.
func syncPath(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", p, err)
	}
}

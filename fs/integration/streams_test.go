package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/alloc"
	sfs "github.com/streamfs/streamfs/fs"
)

// TestStreamIoctl runs the ioctl's error-case program and the seed's example
// program, and checks the streamfs stream tool prints the same lines.
func TestStreamIoctl(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	m := mountImage(t, img)

	dir := m.path("errors")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Log(runProg(t, "stream_errors", dir))

	file := m.path("seeded")
	writeFile(t, file, randBytes(1, 10000), 0o644)
	seed := progs["seed_stream"]

	out := runCmd(t, seed, file, "max")
	maxLine := regexpFind(t, out, `Max streams supported: (\d+)`)
	max, _ := strconv.Atoi(maxLine)
	if max < 2 {
		t.Fatalf("seed_stream max: %d streams, want at least 2:\n%s", max, out)
	}
	if got := runCmd(t, seed, file, "get"); !hasLine(got, "Current stream ID: 0") {
		t.Errorf("seed_stream get on a new file: %q", got)
	}
	if got := runCmd(t, seed, file, "set", "2"); !hasLine(got, "Set stream ID to: 2") {
		t.Errorf("seed_stream set 2: %q", got)
	}
	// get opens the file anew each time: the id belongs to the inode.
	for i := 0; i < 2; i++ {
		if got := runCmd(t, seed, file, "get"); !hasLine(got, "Current stream ID: 2") {
			t.Errorf("seed_stream get after set 2: %q", got)
		}
	}

	// The CLI prints the same lines.
	if got := streamfs(t, "stream", "max", file); !hasLine(got, "Max streams supported: "+maxLine) {
		t.Errorf("streamfs stream max: %q", got)
	}
	if got := streamfs(t, "stream", "get", file); !hasLine(got, "Current stream ID: 2") {
		t.Errorf("streamfs stream get: %q", got)
	}
	if got := streamfs(t, "stream", "set", file, "1"); !hasLine(got, "Set stream ID to: 1") {
		t.Errorf("streamfs stream set 1: %q", got)
	}
	if got := runCmd(t, seed, file, "get"); !hasLine(got, "Current stream ID: 1") {
		t.Errorf("seed_stream get after streamfs stream set 1: %q", got)
	}

	// An id above the maximum: EINVAL in perror's wording, from both.
	above := strconv.Itoa(max + 1)
	_, stderr, err := tryCmdSplit(seed, file, "set", above)
	if exitCode(err) != 1 || !strings.Contains(stderr, "ioctl(SET) failed: Invalid argument") {
		t.Errorf("seed_stream set %s: %v, stderr %q; want exit 1 and \"ioctl(SET) failed: Invalid argument\"", above, err, stderr)
	}
	_, stderr, err = tryCmdSplit(streamfsBin, "stream", "set", file, above)
	if exitCode(err) != 1 || !strings.Contains(stderr, "ioctl(SET) failed: Invalid argument") {
		t.Errorf("streamfs stream set %s: %v, stderr %q; want exit 1 and \"ioctl(SET) failed: Invalid argument\"", above, err, stderr)
	}
	if got := streamfs(t, "stream", "get", file); !hasLine(got, "Current stream ID: 1") {
		t.Errorf("a refused set changed the id: %q", got)
	}
	// A bad command line is a usage error.
	if _, _, err := tryCmdSplit(streamfsBin, "stream", "set", file, "abc"); exitCode(err) != 2 {
		t.Errorf("streamfs stream set FILE abc: %v, want exit 2", err)
	}
	// Outside streamfs the ioctl is not supported.
	outside := t.TempDir() + "/plain"
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tryCmdSplit(streamfsBin, "stream", "get", outside); exitCode(err) != 1 {
		t.Errorf("streamfs stream get on a non-streamfs file: %v, want exit 1", err)
	}

	// The id survives a remount.
	m = m.remount(t)
	if got := runCmd(t, seed, file, "get"); !hasLine(got, "Current stream ID: 1") {
		t.Errorf("seed_stream get after remount: %q", got)
	}
}

// regexpFind returns the first submatch of re in s.
func regexpFind(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q does not match %q", s, re)
	}
	return m[1]
}

// TestStreamPlacement checks software-stream placement on a 64-AG image:
// each stream's data lands in its own AG set, files without a stream in the
// generic AG set, and the ids survive a remount.
func TestStreamPlacement(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G", "--ag-count", "64")
	m := mountImage(t, img)
	info := streamfs(t, "info", "--json", m.dir)
	var sb struct {
		AGCount  uint32 `json:"ag_count"`
		AGBlocks uint64 `json:"ag_blocks"`
	}
	if err := json.Unmarshal([]byte(info), &sb); err != nil {
		t.Fatalf("info --json: %v\n%s", err, info)
	}
	if sb.AGCount != 64 || sb.AGBlocks*4096 != 32<<20 {
		t.Fatalf("info: %d AGs of %d blocks, want 64 of 32 MiB", sb.AGCount, sb.AGBlocks)
	}
	if got := streamfs(t, "stream", "max", m.dir); !hasLine(got, "Max streams supported: 16") {
		t.Fatalf("64 AGs: %q, want 16 software streams", got)
	}

	const filesPerDir = 3
	for s := 1; s <= 4; s++ {
		d := m.path(fmt.Sprintf("s%d", s))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		streamfs(t, "stream", "set", d, strconv.Itoa(s))
	}
	if err := os.Mkdir(m.path("plain"), 0o755); err != nil {
		t.Fatal(err)
	}

	// Write concurrently in every directory, in 256 KiB chunks so the
	// allocations of the streams interleave.
	dirs := []string{"s1", "s2", "s3", "s4", "plain"}
	var wg sync.WaitGroup
	errs := make(chan error, len(dirs)*filesPerDir)
	for _, d := range dirs {
		for i := 0; i < filesPerDir; i++ {
			wg.Add(1)
			go func(p string, seed int64) {
				defer wg.Done()
				f, err := os.Create(p)
				if err != nil {
					errs <- err
					return
				}
				defer f.Close()
				data := randBytes(seed, 6<<20)
				for off := 0; off < len(data); off += 256 << 10 {
					if _, err := f.Write(data[off : off+256<<10]); err != nil {
						errs <- err
						return
					}
				}
				if err := f.Sync(); err != nil {
					errs <- err
				}
			}(m.path(d, fmt.Sprintf("f%d", i)), int64(len(d)*100+i))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	check := func(m *mount) {
		t.Helper()
		for _, d := range dirs {
			want := uint32(0)
			if d != "plain" {
				n, _ := strconv.Atoi(d[1:])
				want = uint32(n)
			}
			if got := streamOf(t, m.path(d)); got != want {
				t.Errorf("directory %s: stream %d, want %d", d, got, want)
			}
			for i := 0; i < filesPerDir; i++ {
				p := m.path(d, fmt.Sprintf("f%d", i))
				if got := streamOf(t, p); got != want {
					t.Errorf("%s: stream %d, want %d (inherited from its directory)", p, got, want)
				}
				checkContent(t, p, randBytes(int64(len(d)*100+i), 6<<20))
				var doc sfs.BmapDoc
				if err := json.Unmarshal([]byte(streamfs(t, "bmap", "--json", p)), &doc); err != nil {
					t.Fatalf("bmap --json %s: %v", p, err)
				}
				if len(doc.Extents) == 0 {
					t.Errorf("%s: no extents", p)
				}
				total := uint64(0)
				for _, e := range doc.Extents {
					total += e.Length
					if e.AG == nil {
						t.Fatalf("%s: extent %+v has no AG", p, e)
					}
					if e.Stream != want {
						t.Errorf("%s: extent %+v written under stream %d, want %d", p, e, e.Stream, want)
					}
					if want == 0 {
						// The generic AG set of 2: the inode's AG and
						// the next, chosen by agino % 2.
						ino := inoOf(t, p)
						ag := (alloc.InoAG(ino) + alloc.InoAGino(ino)%2) % 64
						if *e.AG != ag {
							t.Errorf("%s: unstreamed extent in AG %d, want AG %d (inode %#x)", p, *e.AG, ag, ino)
						}
						continue
					}
					lo := uint32(want-1) * 4
					if *e.AG < lo || *e.AG > lo+3 {
						t.Errorf("%s: stream %d extent in AG %d, want AGs %d..%d", p, want, *e.AG, lo, lo+3)
					}
				}
				if total != 6<<20 {
					t.Errorf("%s: extents cover %d bytes, want %d", p, total, 6<<20)
				}
			}
		}
	}
	check(m)
	m = m.remount(t)
	check(m)
}

func inoOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

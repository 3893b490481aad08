package meta

// Scale benchmark of the metadata layer without FUSE: create N empty files
// spread over a few directories on a sparse image, then Close (the final
// checkpoint), Open again (mount), look up a sample of the files and remove
// a sample. It reports creates/s (overall and per slice, to show whether the
// rate degrades as the trees grow), Go heap and process RSS (VmRSS, VmHWM),
// the checkpoints taken, and the Close and Open times.
//
// It is skipped unless STREAMFS_SCALE_FILES is set, e.g.
//
//	STREAMFS_SCALE_FILES=1000000 go test ./fs/meta -run TestScaleCreate -v -timeout 2h
//	STREAMFS_SCALE_FILES=1000000,10000000 STREAMFS_SCALE_DIRS=4 go test ./fs/meta -run TestScaleCreate -v -timeout 4h
//
// Environment:
//
//	STREAMFS_SCALE_FILES   comma-separated file counts, one fresh filesystem each
//	STREAMFS_SCALE_DIRS    directories the files are spread over (default 4)
//	STREAMFS_SCALE_WORKERS goroutines creating at once, one directory each at a
//	                       time (default 1: like a single creating process)
//	STREAMFS_SCALE_SIZE    image size in bytes (default 32 GiB, sparse)
//	STREAMFS_SCALE_DIR     directory for the image (default the test's temp dir)
//	STREAMFS_SCALE_CACHE   node cache bytes (default: the mount default)
//	STREAMFS_SCALE_AGS     AG count (default 4, as scripts/bench/meta.sh)
//	STREAMFS_SCALE_CPUPROFILE  write a CPU profile of the create phase to this
//	                       file (suffixed with the file count)
//	STREAMFS_SCALE_MEMPROFILE  write a heap profile after the creates (before
//	                       Close) to this file (suffixed with the file count)
//
// VmHWM is reset (/proc/self/clear_refs "5") before each phase where
// possible, so the peaks are per phase. The image is removed at the end.

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func scaleEnvInt(name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", name, v, err))
	}
	return n
}

// procStatusMiB returns VmRSS and VmHWM of this process in MiB.
func procStatusMiB() (rss, hwm float64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// resetHWM resets VmHWM to the current RSS (Linux >= 4.0).
func resetHWM() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func heapMiB() (heapInuse, sys float64, numGC uint32) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20), float64(m.Sys) / (1 << 20), m.NumGC
}

func scaleMem(t *testing.T, phase string) {
	rss, hwm := procStatusMiB()
	heap, sys, ngc := heapMiB()
	t.Logf("  mem %-22s VmRSS %7.0f MiB  VmHWM %7.0f MiB  Go heap in use %7.0f MiB  Go sys %7.0f MiB  GCs %d",
		phase, rss, hwm, heap, sys, ngc)
}

func TestScaleCreate(t *testing.T) {
	spec := os.Getenv("STREAMFS_SCALE_FILES")
	if spec == "" {
		t.Skip("set STREAMFS_SCALE_FILES (e.g. 1000000) to run the scale benchmark")
	}
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("STREAMFS_SCALE_FILES: bad count %q", f)
		}
		t.Run(fmt.Sprint(n), func(t *testing.T) { scaleCreate(t, int(n)) })
	}
}

func scaleCreate(t *testing.T, nFiles int) {
	dirs := int(scaleEnvInt("STREAMFS_SCALE_DIRS", 4))
	workers := int(scaleEnvInt("STREAMFS_SCALE_WORKERS", 1))
	size := scaleEnvInt("STREAMFS_SCALE_SIZE", 32<<30)
	ags := uint32(scaleEnvInt("STREAMFS_SCALE_AGS", 4))
	opts := testOpts()
	opts.CommitInterval = 5 * time.Second // as mounted: the committer runs
	opts.CacheBytes = scaleEnvInt("STREAMFS_SCALE_CACHE", 0)

	dir := os.Getenv("STREAMFS_SCALE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("scale-%d-%d.img", os.Getpid(), nFiles))
	defer os.Remove(path)
	dev := newPlainImage(t, path, size, uint32(ags))
	runtime.GC()
	debug.FreeOSMemory()
	resetHWM()
	t.Logf("%d files in %d directories, %d worker(s), %d GiB sparse image, %d AGs, cache %d bytes (0 = default %d)",
		nFiles, dirs, workers, size>>30, ags, opts.CacheBytes, DefaultCacheBytes)
	scaleMem(t, "before mount")

	t0 := time.Now()
	s, err := Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mount (empty): %v", time.Since(t0))
	ds := make([]*Inode, dirs)
	for i := range ds {
		if ds[i], err = s.Create(s.Root(), fmt.Sprintf("d%d", i), NewInode{Mode: syscall.S_IFDIR | 0o755}); err != nil {
			t.Fatal(err)
		}
	}

	if p := os.Getenv("STREAMFS_SCALE_CPUPROFILE"); p != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", p, nFiles))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	// File i goes to directory i % dirs, named f<i>.
	var next atomic.Int64
	var failed atomic.Value
	slice := max(nFiles/10, 1)
	var mu sync.Mutex
	sliceStart, lastDone := time.Now(), 0
	var done atomic.Int64
	var maxOp atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= nFiles || failed.Load() != nil {
					return
				}
				o0 := time.Now()
				if _, err := s.Create(ds[i%dirs], "f"+strconv.Itoa(i), NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
					failed.Store(fmt.Errorf("create %d: %w", i, err))
					return
				}
				if d := int64(time.Since(o0)); d > maxOp.Load() {
					maxOp.Store(d) // racy max, good enough for a report
				}
				if n := int(done.Add(1)); n%slice == 0 {
					mu.Lock()
					el := time.Since(sliceStart)
					c := s.Counters()
					rss, _ := procStatusMiB()
					heap, _, _ := heapMiB()
					t.Logf("  %9d files: %8.0f creates/s in the last %d (%6.1fs), max op %v, checkpoints %d, last ckpt %.1f MiB, VmRSS %.0f MiB, heap %.0f MiB",
						n, float64(n-lastDone)/el.Seconds(), n-lastDone, el.Seconds(),
						time.Duration(maxOp.Swap(0)).Round(time.Microsecond), c.Checkpoints,
						float64(c.CheckpointPayload)/(1<<20), rss, heap)
					sliceStart, lastDone = time.Now(), n
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		t.Fatal(e)
	}
	createSecs := time.Since(start).Seconds()
	if p := os.Getenv("STREAMFS_SCALE_CPUPROFILE"); p != "" {
		pprof.StopCPUProfile()
	}
	c := s.Counters()
	t.Logf("RESULT create: %d files in %.1fs = %.0f creates/s (checkpoints %d, cache hits %d misses %d)",
		nFiles, createSecs, float64(nFiles)/createSecs, c.Checkpoints, c.CacheHits, c.CacheMisses)
	scaleMem(t, "after creates")
	if p := os.Getenv("STREAMFS_SCALE_MEMPROFILE"); p != "" {
		runtime.GC()
		f, err := os.Create(fmt.Sprintf("%s.%d", p, nFiles))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		scaleMem(t, "after creates+GC")
	}

	ds = nil
	t0 = time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closeT := time.Since(t0)
	s = nil
	t.Logf("RESULT close (unmount, final checkpoint): %v", closeT)
	runtime.GC()
	debug.FreeOSMemory()
	scaleMem(t, "after close+GC")

	resetHWM()
	t0 = time.Now()
	s, err = Open(dev, opts)
	if err != nil {
		t.Fatal(err)
	}
	openT := time.Since(t0)
	t.Logf("RESULT mount with %d files: %v", nFiles, openT)
	scaleMem(t, "after mount")

	// Lookups of random names (cold cache at first).
	root := s.Root()
	ds = make([]*Inode, dirs)
	for i := range ds {
		if ds[i], err = s.Lookup(root, fmt.Sprintf("d%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	const nLook = 100000
	r := rand.New(rand.NewPCG(1, 2))
	t0 = time.Now()
	for k := 0; k < nLook; k++ {
		i := r.IntN(nFiles)
		if _, err := s.Lookup(ds[i%dirs], "f"+strconv.Itoa(i)); err != nil {
			t.Fatalf("lookup f%d: %v", i, err)
		}
	}
	el := time.Since(t0).Seconds()
	t.Logf("RESULT lookup+load of %d random files after mount: %.0f /s", nLook, nLook/el)

	// Readdir of one directory.
	t0 = time.Now()
	ents, err := s.Readdir(ds[0])
	if err != nil {
		t.Fatal(err)
	}
	el = time.Since(t0).Seconds()
	t.Logf("RESULT readdir of d0 (%d entries): %.2fs = %.0f entries/s", len(ents), el, float64(len(ents))/el)
	ents = nil

	// Remove a sample.
	nRm := min(nFiles, 100000)
	t0 = time.Now()
	for i := 0; i < nRm; i++ {
		if err := s.Remove(ds[i%dirs], "f"+strconv.Itoa(i), false); err != nil {
			t.Fatalf("remove f%d: %v", i, err)
		}
	}
	el = time.Since(t0).Seconds()
	t.Logf("RESULT remove of %d files: %.0f /s", nRm, float64(nRm)/el)
	scaleMem(t, "after lookups+rm")

	t0 = time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("RESULT second close: %v", time.Since(t0))
	if fi, err := os.Stat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			t.Logf("image: %d MiB allocated of %d GiB", st.Blocks*512>>20, size>>30)
		}
	}
}

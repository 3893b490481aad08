package meta

// Per-operation benchmarks of the metadata layer on a directory that holds
// STREAMFS_BENCH_FILES entries (default 100,000), on a sparse 32 GiB image
// with 4 AGs as scripts/bench/meta.sh makes it. One store is built per
// process and shared by the sub-benchmarks, which run in order: create,
// lookup (after a remount: cold node cache), rename, unlink. Run with a
// fixed count, e.g.
//
//	go test ./fs/meta -run '^$' -bench BenchmarkMetaOps -benchtime 20000x
//
// STREAMFS_BENCH_PROF=DIR writes one CPU profile per sub-benchmark
// (DIR/<name>.pprof) covering only its timed loop.

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

type opsBench struct {
	dev  backend.Device
	s    *Store
	d    *Inode
	n    int
	path string
	// next name index per operation: b.Run calls a body more than once
	nc, nr, nu int
}

func newOpsBench(b *testing.B) *opsBench {
	n := int(scaleEnvInt("STREAMFS_BENCH_FILES", 100000))
	dir, err := os.MkdirTemp("", "streamfs-bench")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "img")
	dev := newPlainImage(b, path, 32<<30, 4)
	s, err := Open(dev, testOpts())
	if err != nil {
		b.Fatal(err)
	}
	d, err := s.Create(s.Root(), "d", NewInode{Mode: syscall.S_IFDIR | 0o755})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := s.Create(d, "f"+strconv.Itoa(i), NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
			b.Fatal(err)
		}
	}
	return &opsBench{dev: dev, s: s, d: d, n: n, path: path}
}

func (o *opsBench) remount(b *testing.B) {
	if err := o.s.Close(); err != nil {
		b.Fatal(err)
	}
	s, err := Open(o.dev, testOpts())
	if err != nil {
		b.Fatal(err)
	}
	o.s = s
	if o.d, err = s.Lookup(s.Root(), "d"); err != nil {
		b.Fatal(err)
	}
}

func (o *opsBench) close() {
	o.s.Close()
	o.dev.Close()
	os.RemoveAll(filepath.Dir(o.path))
}

func profiled(b *testing.B, name string, fn func()) {
	dir := os.Getenv("STREAMFS_BENCH_PROF")
	if dir != "" {
		f, err := os.Create(filepath.Join(dir, name+".pprof"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	fn()
	b.StopTimer()
}

func BenchmarkMetaOps(b *testing.B) {
	o := newOpsBench(b)
	defer o.close()
	b.Run("create", func(b *testing.B) {
		profiled(b, "create", func() {
			for k := 0; k < b.N; k++ {
				i := o.nc
				o.nc++
				if _, err := o.s.Create(o.d, "c"+strconv.Itoa(i), NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	o.remount(b)
	b.Run("lookup-cold", func(b *testing.B) {
		profiled(b, "lookup", func() {
			for i := 0; i < b.N; i++ {
				in, err := o.s.Lookup(o.d, "f"+strconv.Itoa(i%o.n))
				if err != nil {
					b.Fatal(err)
				}
				_ = in.Attr()
			}
		})
	})
	b.Run("rename", func(b *testing.B) {
		if o.nr+b.N > o.n {
			b.Skip("b.N above the directory size")
		}
		profiled(b, "rename", func() {
			for k := 0; k < b.N; k++ {
				i := o.nr
				o.nr++
				if err := o.s.Rename(o.d, "f"+strconv.Itoa(i), o.d, "g"+strconv.Itoa(i), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("unlink", func(b *testing.B) {
		if o.nu+b.N > o.n {
			b.Skip("b.N above the directory size")
		}
		profiled(b, "unlink", func() {
			for k := 0; k < b.N; k++ {
				i := o.nu
				o.nu++
				name := "g" + strconv.Itoa(i)
				err := o.s.Remove(o.d, name, false)
				if err == syscall.ENOENT {
					err = o.s.Remove(o.d, "f"+strconv.Itoa(i), false)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	sfs "github.com/streamfs/streamfs/fs"
)

// TestCPrograms runs each C program of testdata against a directory of the
// mount: each must print OK and exit 0.
func TestCPrograms(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	m := mountImage(t, img)
	for _, name := range []string{"odirect", "fallocate", "seek", "rename_exchange", "unlinked", "bigfile", "mmap", "append", "coherence"} {
		t.Run(name, func(t *testing.T) {
			dir := m.path(name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Log(runProg(t, name, dir))
		})
	}
	// The programs' files survive a remount intact enough to be listed and
	// removed.
	m = m.remount(t)
	runCmd(t, "rm", "-rf", m.path("odirect"), m.path("append"))
}

// TestFio runs fio with data verification: 4k random O_DIRECT writes from
// two jobs, then buffered sequential writes.
func TestFio(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "2G")
	m := mountImage(t, img)
	rnd := m.path("rand")
	seq := m.path("seq")
	for _, d := range []string{rnd, seq} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runCmd(t, "fio", "--name=v", "--directory="+rnd, "--size=64m", "--bs=4k", "--rw=randwrite",
		"--verify=crc32c", "--ioengine=psync", "--direct=1", "--numjobs=2", "--verify_fatal=1", "--verify_state_save=0")
	runCmd(t, "fio", "--name=s", "--directory="+seq, "--size=128m", "--bs=256k", "--rw=write",
		"--verify=crc32c", "--ioengine=psync", "--numjobs=2", "--end_fsync=1", "--verify_fatal=1", "--verify_state_save=0")
	// libaio at depth 16, mixed reads and writes, in a directory with a
	// stream: fio recreates its files, and they inherit the stream.
	aio := m.path("aio")
	if err := os.Mkdir(aio, 0o755); err != nil {
		t.Fatal(err)
	}
	streamfs(t, "stream", "set", aio, "2")
	runCmd(t, "fio", "--name=a", "--directory="+aio, "--size=32m", "--bs=4k", "--rw=randrw",
		"--verify=crc32c", "--ioengine=libaio", "--iodepth=16", "--direct=1", "--numjobs=2", "--verify_fatal=1", "--verify_state_save=0")
	names, err := filepath.Glob(filepath.Join(aio, "*"))
	if err != nil || len(names) != 2 {
		t.Fatalf("fio files in %s: %v %v", aio, names, err)
	}
	for _, p := range names {
		var doc sfs.BmapDoc
		if err := json.Unmarshal([]byte(streamfs(t, "bmap", "--json", p)), &doc); err != nil {
			t.Fatal(err)
		}
		for _, e := range doc.Extents {
			if e.Stream != 2 {
				t.Errorf("%s: extent %+v not written under the directory's stream 2", p, e)
				break
			}
		}
	}

	// A verify-only pass after a remount reads what the first job wrote.
	m = m.remount(t)
	runCmd(t, "fio", "--name=s", "--directory="+seq, "--size=128m", "--bs=256k", "--rw=write",
		"--verify=crc32c", "--ioengine=psync", "--numjobs=2", "--verify_only", "--verify_fatal=1", "--verify_state_save=0")
}

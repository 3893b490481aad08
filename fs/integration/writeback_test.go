package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	sfs "github.com/streamfs/streamfs/fs"
)

// With the FUSE writeback cache the kernel owns a regular file's size,
// mtime and ctime: it stamps them at write(2), sends them with SETATTR and
// writes the data back later. These tests check that the daemon's copy
// ends up as the kernel's, across a remount (which drops the kernel's).

// statTimes returns st's mtime and ctime.
func statTimes(st syscall.Stat_t) (mtime, ctime time.Time) {
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec), time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
}

// TestWritebackTimestamps: buffered writes, touch and truncate leave the
// times the kernel reported, and a late writeback does not move them.
func TestWritebackTimestamps(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "1G")
	m := mountImage(t, img)
	old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)

	// 1. Buffered writes after the times were set into the past: the
	// write moves mtime and ctime forward, to the same values the
	// daemon keeps once the data is written back and the mount is gone.
	p := m.path("written")
	data := randBytes(11, 3<<20+123)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 4096 {
		if _, err := f.Write(data[off:min(off+4096, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	st := lstatT(t, p)
	mt, ct := statTimes(st)
	if st.Size != int64(len(data)) {
		t.Errorf("size right after buffered writes: %d, want %d", st.Size, len(data))
	}
	if !mt.After(old) || ct.Before(mt) {
		t.Errorf("after buffered writes: mtime %v, ctime %v; want both after %v, ctime >= mtime", mt, ct, old)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	written := lstatT(t, p)

	// 2. touch -d over dirty pages: the explicit time wins over the
	// data written back after it.
	q := m.path("touched")
	g, err := os.Create(q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(q, old, old); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil { // writes the data back after the touch
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if mt, _ := statTimes(lstatT(t, q)); !mt.Equal(old) {
		t.Errorf("touched file: mtime %v after fsync, want %v", mt, old)
	}

	// 3. truncate moves mtime and ctime (and the size) through SETATTR.
	r := m.path("truncated")
	writeFile(t, r, data, 0o644)
	if err := os.Chtimes(r, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(r, 5000); err != nil {
		t.Fatal(err)
	}
	st = lstatT(t, r)
	if mt, ct := statTimes(st); !mt.After(old) || !ct.After(old) || st.Size != 5000 {
		t.Errorf("after truncate: size %d, mtime %v, ctime %v; want 5000 and both after %v", st.Size, mt, ct, old)
	}
	truncated := st

	// The daemon holds what the kernel showed: remount drops the kernel's copy.
	m = m.remount(t)
	for _, c := range []struct {
		path string
		want syscall.Stat_t
	}{{p, written}, {r, truncated}} {
		got := lstatT(t, c.path)
		if got.Size != c.want.Size || got.Mtim != c.want.Mtim {
			t.Errorf("%s after remount: size %d mtime %v, before remount size %d mtime %v",
				c.path, got.Size, got.Mtim, c.want.Size, c.want.Mtim)
		}
	}
	if mt, _ := statTimes(lstatT(t, q)); !mt.Equal(old) {
		t.Errorf("touched file after remount: mtime %v, want %v", mt, old)
	}
	checkContent(t, p, data)
	checkContent(t, q, data)
	checkContent(t, r, data[:5000])
}

// TestWritebackWholeExtents: buffered 1 MiB writes from 8 jobs in 8
// directories (issue 11's workload B, scaled down) reach the daemon as
// concurrent async WRITEs served out of order; each file still lands in
// one extent, as on XFS, and its data verifies after a remount.
func TestWritebackWholeExtents(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "4G", "--ag-count", "16")
	m := mountImage(t, img)
	const jobs = 8
	fio := func(extra ...string) {
		t.Helper()
		args := append([]string{"--name=wb", "--directory=" + m.path(), "--filename_format=d$jobnum/f",
			"--rw=write", "--bs=1M", "--size=64m", "--ioengine=psync", "--numjobs=" + strconv.Itoa(jobs),
			"--fallocate=none", "--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0"}, extra...)
		runCmd(t, "fio", args...)
	}
	for j := range jobs {
		if err := os.Mkdir(m.path(fmt.Sprintf("d%d", j)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fio("--end_fsync=1", "--do_verify=0")
	for j := range jobs {
		p := m.path(fmt.Sprintf("d%d", j), "f")
		var doc sfs.BmapDoc
		if err := json.Unmarshal([]byte(streamfs(t, "bmap", "--json", p)), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Extents) != 1 {
			t.Errorf("%s: %d extents, want 1: %+v", p, len(doc.Extents), doc.Extents)
		}
	}
	m = m.remount(t)
	fio("--verify_only")
}

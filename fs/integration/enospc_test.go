package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestENOSPC fills a small filesystem until ENOSPC, checks the error the
// writer sees, that earlier files are intact, and that removing a file makes
// room at once; statfs follows along.
func TestENOSPC(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "64M")
	m := mountImage(t, img)

	st0 := statfs(t, m.dir)
	bsize := uint64(st0.Bsize)
	if st0.Bfree == 0 || st0.Bfree > st0.Blocks || st0.Bavail > st0.Bfree {
		t.Fatalf("statfs of a fresh filesystem: blocks %d free %d avail %d", st0.Blocks, st0.Bfree, st0.Bavail)
	}

	keep := randBytes(1, 4<<20+123)
	big := randBytes(2, 16<<20)
	writeFile(t, m.path("keep"), keep, 0o644)
	writeFile(t, m.path("big"), big, 0o644)
	st1 := statfs(t, m.dir)
	used := (st0.Bfree - st1.Bfree) * bsize
	if used < uint64(len(keep)+len(big)) || used > uint64(len(keep)+len(big))+1<<20 {
		t.Errorf("free space went from %d to %d blocks: %d bytes for %d bytes of files", st0.Bfree, st1.Bfree, used, len(keep)+len(big))
	}

	// Fill it up: dd must fail with ENOSPC, not succeed or fail otherwise.
	out, err := tryCmd("dd", "if=/dev/zero", "of="+m.path("fill"), "bs=1M", "status=none")
	if err == nil {
		t.Fatalf("dd filled a 64M filesystem with no error: %s", out)
	}
	if !strings.Contains(out, "No space left on device") {
		t.Fatalf("dd: %v, want \"No space left on device\":\n%s", err, out)
	}
	stFull := statfs(t, m.dir)
	if stFull.Bfree*bsize >= 1<<20 {
		t.Errorf("statfs after ENOSPC: %d blocks free (%d bytes), want less than 1 MiB", stFull.Bfree, stFull.Bfree*bsize)
	}
	fi, err := os.Stat(m.path("fill"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 || uint64(fi.Size()) > (st1.Bfree+1)*bsize {
		t.Errorf("fill is %d bytes with %d blocks free before", fi.Size(), st1.Bfree)
	}
	// A small write and fsync fail cleanly too.
	if f, err := os.OpenFile(m.path("more"), os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		_, werr := f.Write(make([]byte, 2<<20))
		serr := f.Sync()
		f.Close()
		if werr == nil && serr == nil {
			t.Errorf("writing 2 MiB to a full filesystem succeeded")
		}
		os.Remove(m.path("more"))
	}

	checkContent(t, m.path("keep"), keep)
	checkContent(t, m.path("big"), big)

	// Removing big makes room at once.
	if err := os.Remove(m.path("big")); err != nil {
		t.Fatal(err)
	}
	stRm := statfs(t, m.dir)
	if gained := (stRm.Bfree - stFull.Bfree) * bsize; stRm.Bfree < stFull.Bfree || gained < uint64(len(big)) {
		t.Errorf("removing a 16 MiB file: free blocks %d -> %d", stFull.Bfree, stRm.Bfree)
	}
	again := randBytes(3, 12<<20)
	againSrc := filepath.Join(t.TempDir(), "again")
	if err := os.WriteFile(againSrc, again, 0o644); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "dd", "if="+againSrc, "of="+m.path("again"), "bs=1M", "conv=fsync", "status=none")
	checkContent(t, m.path("again"), again)
	checkContent(t, m.path("keep"), keep)
	if st := statfs(t, m.dir); st.Bfree >= stRm.Bfree {
		t.Errorf("writing 12 MiB did not lower free blocks: %d -> %d", stRm.Bfree, st.Bfree)
	}

	// The full filesystem checks clean; everything is still right after a
	// remount, and removing the fill returns the filesystem to its size.
	m.unmount(t)
	if out, stderr, code := fsckStatus(t, "-n", m.img); code != 0 {
		t.Fatalf("fsck -n of the filled filesystem: exit %d\n%s%s", code, out, stderr)
	}
	m = mountAt(t, m.img, m.dir, m.opts...)
	checkContent(t, m.path("keep"), keep)
	checkContent(t, m.path("again"), again)
	for _, n := range []string{"fill", "again", "keep"} {
		if err := os.Remove(m.path(n)); err != nil {
			t.Fatal(err)
		}
	}
	if st := statfs(t, m.dir); !nearlyFree(st.Bfree, st0.Bfree) {
		t.Errorf("free blocks after removing everything: %d, fresh %d", st.Bfree, st0.Bfree)
	}
}

// nearlyFree says free space is back to fresh within what the metadata
// trees may keep: nodes emptied by deletes are not all merged away.
func nearlyFree(free, fresh uint64) bool {
	return free <= fresh && fresh-free <= 64+fresh/1000
}

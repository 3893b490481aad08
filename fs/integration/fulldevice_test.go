package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestFullDevice fills a filesystem to the last block a writer can get —
// small files, files that hold preallocation, then dd until ENOSPC — and
// checks that df showed what dd could write (within 1%), that fsck -y works
// on the full image, and that chmod, touch and rm of every file work on it
// with no EIO and no shutdown, leaving a clean image.
func TestFullDevice(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "128M")
	m := mountImage(t, img)

	// Small files, through coreutils.
	const small = 1500
	sh(t, fmt.Sprintf(`cd %q && mkdir d && cd d && for i in $(seq 1 %d); do echo "file $i" > f$i; done`, m.dir, small))

	// Files that hold preallocation windows: written (and flushed to the
	// daemon) but kept open, as a logger's files are.
	var open []*os.File
	for i := 0; i < 8; i++ {
		f, err := os.OpenFile(m.path(fmt.Sprintf("open%d", i)), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(randBytes(int64(i), 2<<20)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	defer func() {
		for _, f := range open {
			f.Close()
		}
	}()

	st := statfs(t, m.dir)
	avail := st.Bavail * uint64(st.Bsize)
	out, err := tryCmd("dd", "if=/dev/zero", "of="+m.path("fill"), "bs=1M", "oflag=direct", "status=none")
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("dd to a full filesystem: %v, want ENOSPC:\n%s", err, out)
	}
	// Then the last blocks, a few at a time.
	out, err = tryCmd("dd", "if=/dev/zero", "of="+m.path("fill"), "bs=4k", "oflag=direct,append", "conv=notrunc", "status=none")
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("dd of the last blocks: %v, want ENOSPC:\n%s", err, out)
	}
	fi, err := os.Stat(m.path("fill"))
	if err != nil {
		t.Fatal(err)
	}
	got := uint64(fi.Size())
	t.Logf("df showed %d bytes available (other files held preallocation); dd wrote %d", avail, got)
	if diff := int64(got) - int64(avail); diff > int64(avail)/100 || -diff > int64(avail)/100 {
		t.Errorf("dd wrote %d bytes where df showed %d available: more than 1%% apart", got, avail)
	}
	for _, f := range open {
		if err := f.Close(); err != nil {
			t.Fatalf("close of a file that held preallocation: %v", err)
		}
	}
	open = nil

	// fsck -y on the full image.
	m.unmount(t)
	if out, stderr, code := fsckStatus(t, "-y", img); code != 0 {
		t.Fatalf("fsck -y on a full image: exit %d\n%s%s", code, out, stderr)
	}
	m = mountAt(t, img, m.dir)

	// Every file: chmod, touch, then rm — none may fail.
	sh(t, fmt.Sprintf(`cd %q && chmod 600 d/* && touch d/* && rm -r d && rm open* fill`, m.dir))
	var stats struct {
		Shutdown bool `json:"shutdown"`
	}
	if err := json.Unmarshal([]byte(streamfs(t, "stats", "--json", m.dir)), &stats); err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	if stats.Shutdown {
		t.Fatal("the filesystem shut down")
	}
	if ents, err := os.ReadDir(m.dir); err != nil || len(ents) != 0 {
		t.Fatalf("after rm of every file: %v, %d entries left", err, len(ents))
	}
	if strings.Contains(m.log.String(), "shut down") {
		t.Fatalf("daemon log mentions a shutdown:\n%s", m.log.String())
	}
	m.unmount(t)
	if out, stderr, code := fsckStatus(t, "-n", img); code != 0 {
		t.Fatalf("fsck -n after emptying the full filesystem: exit %d\n%s%s", code, out, stderr)
	}
}

package faulty_test

import (
	"bytes"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

// TestRemountCutImages is the use CutImage is for: one running filesystem,
// crash images taken at several points with every cut mode, each mounted and
// checked while the original carries on. What was fsynced must be there.
func TestRemountCutImages(t *testing.T) {
	mem, err := faulty.NewMem(32<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	fd := faulty.New(mem, 11)
	if _, err := meta.Mkfs(fd, format.MkfsParams{}); err != nil {
		t.Fatal(err)
	}
	s, err := meta.Open(fd, meta.Options{CommitInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	opts := []faulty.CutOptions{
		{},
		{KeepRandomPrefix: true, TearLast: true, Garbage: true},
		{Reorder: true},
		{Reorder: true, TearLast: true, TearAny: true, Garbage: true},
	}
	// Block-aligned sizes: the unsynced append below then goes to new
	// blocks. An unsynced overwrite in place may legitimately leave a
	// garbled sector in fsynced data (Garbage), so the test does not make
	// one.
	content := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, 16384+i*4096) }
	for i := range 6 {
		in, err := s.Create(s.Root(), fmt.Sprint("f", i), meta.NewInode{Mode: syscall.S_IFREG | 0o644})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(in, content(i), 0, meta.WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Fsync(in); err != nil {
			t.Fatal(err)
		}
		// Unsynced changes after the fsync are what the cut plays with.
		if _, err := s.Write(in, content(i+10), int64(len(content(i))), meta.WriteOpts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(s.Root(), fmt.Sprint("unsynced", i), meta.NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
			t.Fatal(err)
		}
		img, err := fd.CutImage(opts[i%len(opts)])
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img.Clone(), i, content)
		// The same image mounts again (mount replays and rewrites, so
		// each mount gets its own clone).
		checkImage(t, img.Clone(), i, content)
	}
}

// checkImage mounts img, reads back every fsynced file and runs fsck.
func checkImage(t *testing.T, img *faulty.Mem, upTo int, content func(int) []byte) {
	t.Helper()
	s, err := meta.Open(img, meta.Options{CommitInterval: time.Hour})
	if err != nil {
		t.Fatalf("mount crash image %d: %v", upTo, err)
	}
	for i := 0; i <= upTo; i++ {
		in, err := s.Lookup(s.Root(), fmt.Sprint("f", i))
		if err != nil {
			t.Fatalf("image %d: fsynced f%d: %v", upTo, i, err)
		}
		want := content(i)
		got := make([]byte, len(want))
		n, err := s.Read(in, got, 0)
		if err != nil || n != len(want) || !bytes.Equal(got, want) {
			t.Fatalf("image %d: fsynced f%d: read %d bytes, %v, equal %v", upTo, i, n, err, bytes.Equal(got, want))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := meta.Fsck(img, fsck.Options{})
	if err != nil {
		t.Fatalf("image %d: fsck: %v", upTo, err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("image %d: fsck:\n%s", upTo, strings.Join(rep.Problems, "\n"))
	}
}

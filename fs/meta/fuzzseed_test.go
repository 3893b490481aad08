package meta

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
)

// treeSeedDir holds the corpus of the format package's tree entry fuzz
// target; the seeds named image-* come from a real image (below).
const treeSeedDir = "../format/testdata/fuzz/FuzzDecodeTreeEntries"

// imageTreeEntries makes a filesystem with every kind of tree entry (a
// directory with a stream, files with written and preallocated extents, a
// hard link, a long symlink, small and chunked xattrs, an open unlinked
// file) and returns, for each kind, the first entry of it in the trees.
func imageTreeEntries(t *testing.T) map[string][2][]byte {
	t.Helper()
	_, _, s, d := openWithDir(t, 1, 2)
	f := mustCreate(t, s, d, "file")
	mustWrite(t, s, f, datatag.Bytes(f.Ino(), 0, 3*4096+100, 1), 0)
	if err := s.Fallocate(f, 1<<20, 1<<20, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Link(s.Root(), "hard", f); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(d, "sym", NewInode{Mode: syscall.S_IFLNK | 0o777, Target: strings.Repeat("t/", 400)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(f, "user.small", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Setxattr(d, "user.big", bytes.Repeat([]byte{0xa5}, 1500), 0); err != nil {
		t.Fatal(err)
	}
	o := mustCreate(t, s, s.Root(), "open")
	if err := s.OpenFile(o); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(s.Root(), "open", false); err != nil {
		t.Fatal(err)
	}
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	out := map[string][2][]byte{}
	for _, tr := range s.trees {
		err := tr.Ascend(nil, func(k, v []byte) bool {
			if kind := entryKind(k, v); kind != "" {
				if _, ok := out[kind]; !ok {
					out[kind] = [2][]byte{bytes.Clone(k), bytes.Clone(v)}
				}
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Release(o)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// entryKind names the kind of a tree entry ("" for one it does not know).
func entryKind(k, v []byte) string {
	switch {
	case bytes.Equal(k, format.AGHeaderKey()):
		return "ag-header"
	case bytes.HasPrefix(k, format.OrphanPrefix()):
		return "orphan"
	case bytes.HasPrefix(k, format.StreamCountPrefix()):
		return "stream-count"
	case bytes.Equal(k, rotorKey):
		return "rotor"
	case bytes.HasPrefix(k, format.FreePrefix()):
		return "free"
	}
	_, kind, _, err := format.InoKey(k)
	if err != nil {
		return ""
	}
	switch kind {
	case format.KindInode:
		a, err := format.DecodeInodeVal(v)
		if err != nil {
			return ""
		}
		return fmt.Sprintf("inode-%o", a.Mode&syscall.S_IFMT)
	case format.KindTarget:
		return "symlink-target"
	case format.KindXattr:
		if len(v) == format.ChunkBytes {
			return "xattr-chunk"
		}
		return "xattr"
	case format.KindExtent:
		if _, _, _, flags, _, err := format.DecodeExtent(k, v); err == nil && flags&format.ExtUnwritten != 0 {
			return "extent-unwritten"
		}
		return "extent"
	case format.KindDirent:
		return "dirent"
	}
	return ""
}

// The tree entry fuzz target is seeded with entries of a real image, one
// of every kind. STREAMFS_WRITE_SEEDS=1 writes them anew; otherwise this
// checks that the image has every kind, that each entry decodes, and that
// the committed corpus has a seed of every kind.
func TestTreeEntrySeeds(t *testing.T) {
	entries := imageTreeEntries(t)
	kinds := []string{"ag-header", "orphan", "stream-count", "rotor", "free", "inode-100000", "inode-40000",
		"inode-120000", "symlink-target", "xattr", "xattr-chunk", "extent", "extent-unwritten", "dirent"}
	for _, kind := range kinds {
		e, ok := entries[kind]
		if !ok {
			t.Errorf("the image has no %s entry", kind)
			continue
		}
		k, v := e[0], e[1]
		var err error
		switch {
		case kind == "ag-header":
			_, err = format.DecodeAGHeader(v)
		case kind == "free":
			_, _, err = format.DecodeFree(k, v)
		case strings.HasPrefix(kind, "inode-"):
			_, err = format.DecodeInodeVal(v)
		case strings.HasPrefix(kind, "extent"):
			_, _, _, _, _, err = format.DecodeExtent(k, v)
		case kind == "dirent":
			_, _, _, _, err = format.DecodeDirent(k, v)
		}
		if err != nil {
			t.Errorf("%s entry % x → % x: %v", kind, k, v, err)
		}
	}
	if os.Getenv("STREAMFS_WRITE_SEEDS") != "" {
		if err := os.MkdirAll(treeSeedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for kind, e := range entries {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\n", e[0], e[1])
			if err := os.WriteFile(filepath.Join(treeSeedDir, "image-"+kind), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	have, err := filepath.Glob(filepath.Join(treeSeedDir, "image-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range kinds {
		if !slices.Contains(have, filepath.Join(treeSeedDir, "image-"+kind)) {
			t.Errorf("no seed image-%s in %s (STREAMFS_WRITE_SEEDS=1 go test -run TestTreeEntrySeeds ./fs/meta writes them)", kind, treeSeedDir)
		}
	}
}

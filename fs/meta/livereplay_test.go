package meta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/crashtest/datatag"
	"github.com/streamfs/streamfs/fs/format"
)

// Every record a test applies from its in-memory form is checked against
// what replay would decode from the bytes journaled for it (txn.rec); not
// in a benchmark run, which measures the write path without the check.
func init() {
	for i, a := range os.Args {
		if strings.HasPrefix(a, "--") {
			a = a[1:]
		}
		if (strings.HasPrefix(a, "-test.bench=") && a != "-test.bench=") || (a == "-test.bench" && i+1 < len(os.Args)) {
			return
		}
	}
	checkRecords = sameAsJournaled
}

func sameAsJournaled(applied format.Record, journaled []byte) error {
	var last *format.Record
	if err := format.DecodeRecords(journaled, func(r *format.Record) error { last = r; return nil }); err != nil {
		return fmt.Errorf("journaled records do not decode: %w", err)
	}
	if last == nil {
		return fmt.Errorf("record type %d journaled nothing", applied.Type)
	}
	a, d := applied, *last
	if !bytes.Equal(a.Value, d.Value) {
		return fmt.Errorf("record type %d: applied value %q, journaled %q", a.Type, a.Value, d.Value)
	}
	a.Value, d.Value = nil, nil
	if !reflect.DeepEqual(a, d) {
		return fmt.Errorf("record applied as %+v, journaled as %+v", a, d)
	}
	return nil
}

// TestLiveReplayTrees runs a random sequence of operations of every kind
// (each journals and applies its records from their in-memory form), then
// replays the journal of that run into a fresh Store and compares the two:
// every tree entry of every AG and the AG counters must be identical. A
// record whose in-memory form applies differently from its journaled bytes
// shows up here as a difference.
func TestLiveReplayTrees(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 600
	}
	path := filepath.Join(t.TempDir(), "img")
	dev := newPlainImage(t, path, 512<<20, 4)
	s, err := Open(dev, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ckpts := s.Counters().Checkpoints
	liveOps(t, s, rand.New(rand.NewPCG(3, uint64(steps))), steps)
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	if s.Counters().Checkpoints != ckpts {
		t.Fatalf("a checkpoint ran during the test: replay would not start from the first operation")
	}
	live := storeState(t, s)

	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(cp, img, 0o644); err != nil {
		t.Fatal(err)
	}
	cdev, err := backend.OpenFile(cp, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cdev.Close()
	// Read-only: the journal is replayed into memory, nothing is
	// checkpointed and no orphan is freed.
	o := testOpts()
	o.ReadOnly = true
	r, err := Open(cdev, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	replayed := storeState(t, r)
	if diff := stateDiff(live, replayed); diff != "" {
		t.Fatalf("the live trees and the replayed ones differ (%d entries live, %d replayed):\n%s", len(live), len(replayed), diff)
	}
	t.Logf("%d steps, %d tree entries and counters identical after replay", steps, len(live))
}

// liveOps runs n random operations on s: files, directories and symlinks
// created, linked, renamed and removed, writes, truncates, fallocate in
// every mode, xattrs set and removed, streams set, and files unlinked while
// open, some then released (freed).
func liveOps(t *testing.T, s *Store, rng *rand.Rand, n int) {
	t.Helper()
	type ent struct {
		dir  *Inode
		name string
		in   *Inode
	}
	dirs := []*Inode{s.Root()}
	var files, others []ent
	var open []*Inode // unlinked while open
	seq := 0
	name := func() string { seq++; return fmt.Sprintf("n%d", seq) }
	ok := func(op string, err error) {
		t.Helper()
		if err != nil && (errors.Is(err, syscall.EIO) || s.ReadOnly()) {
			t.Fatalf("%s: %v", op, err)
		}
	}
	pickFile := func() (int, *ent) {
		if len(files) == 0 {
			return -1, nil
		}
		i := rng.IntN(len(files))
		return i, &files[i]
	}
	const bs = 4096
	for step := 0; step < n; step++ {
		switch op := rng.IntN(20); {
		case op < 3 || len(files) == 0:
			d := dirs[rng.IntN(len(dirs))]
			nm := name()
			in, err := s.Create(d, nm, NewInode{Mode: syscall.S_IFREG | 0o644, RuleStream: uint32(rng.IntN(3))})
			ok("create", err)
			if err == nil {
				files = append(files, ent{d, nm, in})
			}
		case op == 3:
			d := dirs[rng.IntN(len(dirs))]
			nm := name()
			in, err := s.Create(d, nm, NewInode{Mode: syscall.S_IFDIR | 0o755})
			ok("mkdir", err)
			if err == nil {
				dirs = append(dirs, in)
				if rng.IntN(2) == 0 {
					ok("set stream", s.SetStream(in, uint32(1+rng.IntN(4))))
				}
			}
		case op == 4:
			d := dirs[rng.IntN(len(dirs))]
			nm := name()
			in, err := s.Create(d, nm, NewInode{Mode: syscall.S_IFLNK | 0o777, Target: strings.Repeat("t", 1+rng.IntN(3000))})
			ok("symlink", err)
			if err == nil {
				others = append(others, ent{d, nm, in})
			}
		case op < 9: // writes: appends, overwrites, holes
			_, f := pickFile()
			size := int64(f.in.Attr().Size)
			off := size
			switch rng.IntN(3) {
			case 0:
				off = rng.Int64N(size + 1)
			case 1:
				off = size + rng.Int64N(8*bs)
			}
			ln := 1 + rng.IntN(3*bs)
			if rng.IntN(2) == 0 {
				off, ln = off/bs*bs, (ln+bs-1)/bs*bs
			}
			_, err := s.Write(f.in, datatag.Bytes(f.in.Ino(), off, ln, byte(step)), off, WriteOpts{})
			ok("write", err)
		case op == 9:
			_, f := pickFile()
			sz := uint64(rng.Int64N(int64(f.in.Attr().Size) + 4*bs))
			ok("truncate", s.Setattr(f.in, SetAttr{Size: &sz}))
		case op == 10:
			_, f := pickFile()
			off := rng.Int64N(int64(f.in.Attr().Size) + 8*bs)
			ln := 1 + rng.Int64N(16*bs)
			mode := []uint32{0, FallocKeepSize, FallocPunchHole | FallocKeepSize, FallocZeroRange}[rng.IntN(4)]
			ok("fallocate", s.Fallocate(f.in, off, ln, mode))
		case op == 11:
			_, f := pickFile()
			v := bytes.Repeat([]byte{byte(step)}, rng.IntN(3)*rng.IntN(3000))
			ok("setxattr", s.Setxattr(f.in, fmt.Sprintf("user.x%d", rng.IntN(3)), v, 0))
		case op == 12:
			_, f := pickFile()
			err := s.Removexattr(f.in, fmt.Sprintf("user.x%d", rng.IntN(3)))
			if !errors.Is(err, syscall.ENODATA) {
				ok("removexattr", err)
			}
		case op == 13:
			_, f := pickFile()
			m := uint32(rng.IntN(0o7777))
			ok("chmod", s.Setattr(f.in, SetAttr{Mode: &m}))
		case op == 14:
			_, f := pickFile()
			d := dirs[rng.IntN(len(dirs))]
			nm := name()
			err := s.Link(d, nm, f.in)
			ok("link", err)
			if err == nil {
				files = append(files, ent{d, nm, f.in})
			}
		case op == 15:
			i, f := pickFile()
			d := dirs[rng.IntN(len(dirs))]
			nm := name()
			err := s.Rename(f.dir, f.name, d, nm, 0)
			ok("rename", err)
			if err == nil {
				files[i].dir, files[i].name = d, nm
			}
		case op == 16:
			i, f := pickFile()
			if rng.IntN(2) == 0 {
				ok("open", s.OpenFile(f.in))
				open = append(open, f.in)
			}
			ok("unlink", s.Remove(f.dir, f.name, false))
			files = append(files[:i], files[i+1:]...)
		case op == 17 && len(others) > 0:
			i := rng.IntN(len(others))
			ok("unlink symlink", s.Remove(others[i].dir, others[i].name, false))
			others = append(others[:i], others[i+1:]...)
		case op == 18 && len(open) > 0:
			// Releasing an unlinked file frees it (RecFree), unless it
			// still has a name (a hard link).
			i := rng.IntN(len(open))
			s.Release(open[i])
			open = append(open[:i], open[i+1:]...)
		case op == 19 && len(dirs) > 1:
			// rmdir, which fails while the directory has entries.
			i := 1 + rng.IntN(len(dirs)-1)
			d := dirs[i]
			p := s.Get(d.Attr().Parent)
			if p == nil {
				continue
			}
			ents, err := s.Readdir(d)
			ok("readdir", err)
			if len(ents) > 0 {
				continue
			}
			var nm string
			pents, err := s.Readdir(p)
			ok("readdir", err)
			for _, e := range pents {
				if e.Ino == d.Ino() {
					nm = e.Name
				}
			}
			if nm == "" {
				continue
			}
			ok("rmdir", s.Remove(p, nm, true))
			dirs = append(dirs[:i], dirs[i+1:]...)
		}
	}
}

// storeState lists every entry of every AG tree, and the AG counters, as
// strings in order.
func storeState(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	for ag, tr := range s.trees {
		err := tr.Ascend(nil, func(k, v []byte) bool {
			out = append(out, fmt.Sprintf("AG %d %x = %x", ag, k, v))
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for ag := range s.ags {
		a := &s.ags[ag]
		a.mu.Lock()
		out = append(out, fmt.Sprintf("AG %d counters: %d inodes, streams %v", ag, a.inodes, a.streams))
		a.mu.Unlock()
	}
	return out
}

// stateDiff describes the first differences between two storeState lists.
func stateDiff(a, b []string) string {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	var out []string
	i, j := 0, 0
	for (i < len(a) || j < len(b)) && len(out) < 20 {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i++
			j++
		case j >= len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, "  live only:     "+a[i])
			i++
		default:
			out = append(out, "  replayed only: "+b[j])
			j++
		}
	}
	return strings.Join(out, "\n")
}

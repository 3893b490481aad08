package meta

import (
	"maps"
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta/wal"
)

// rawCheckpoint writes the trees exactly as they are, without the AG
// counters a checkpoint stores into them first, and shuts the store down
// so that closing it writes nothing more: the image keeps a damaged AG
// header or rotor as the test left it.
func rawCheckpoint(t *testing.T, s *Store) {
	t.Helper()
	err := s.j.CheckpointVia(func(closeTx func()) (wal.Frozen, error) {
		s.opLock.Lock()
		defer s.opLock.Unlock()
		if _, err := s.foldNodeSpace(); err != nil {
			return wal.Frozen{}, err
		}
		f := wal.Frozen{Roots: make([]uint64, len(s.trees))}
		for ag, tr := range s.trees {
			r, fr := tr.Freeze()
			f.Roots[ag] = r
			f.Nodes = append(f.Nodes, fr)
		}
		closeTx()
		return f, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ShutdownNoLogFlush); err != nil {
		t.Fatal(err)
	}
}

// damagedCopy copies the image base, opens it, changes its trees with do
// (under opLock, no journal record) and writes them: as a checkpoint
// would, or with raw exactly as they are (rawCheckpoint). It returns the
// copy's path, closed.
func damagedCopy(t *testing.T, base string, raw bool, do func(s *Store)) string {
	t.Helper()
	p := copyFile(t, base)
	fd := openImage(t, p)
	defer fd.Close()
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	if raw {
		do(s)
		rawCheckpoint(t, s)
	} else {
		s.opLock.Lock()
		do(s)
		s.opLock.Unlock()
		if err := s.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// Damage to each AG counter (inode count, next inode number, stream
// counts, the rotor, the header itself) and stray keys in the AG area:
// fsck -n reports it (exit 4), fsck -y recounts from the trees (exit 1),
// a second fsck is clean, and the filesystem mounts, works and keeps its
// stream counts right.
func TestFsckRepairsCounters(t *testing.T) {
	base := fsckImageN(t, 20)
	// Streams on some files, so that there are stream counts to damage.
	var dirAG uint32
	want := func() map[uint32][4]uint64 {
		fd := openImage(t, base)
		s, err := Open(fd, testOpts())
		if err != nil {
			t.Fatal(err)
		}
		f, _ := s.Lookup(s.Root(), "f")
		if err := s.SetStream(f, 2); err != nil {
			t.Fatal(err)
		}
		d, _ := s.Lookup(s.Root(), "d")
		dirAG = alloc.InoAG(d.Ino())
		if err := s.SetStream(d, 3); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			mustCreate(t, s, d, "s"+itoa(uint64(i)))
		}
		_, bySrc := s.StreamFileSources()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fd.Close()
		return bySrc
	}()
	if rep := fsckRun(t, base, false); len(rep.Problems) != 0 {
		t.Fatalf("image with streams: %v", rep.Problems)
	}
	type damage struct {
		do   func(s *Store)
		raw  bool   // write the trees without storing the counters
		want string // in one of fsck -n's problems
	}
	cases := map[string]damage{
		"inode count":       {do: func(s *Store) { s.ags[dirAG].add(0, 0, 40) }, want: "inodes, the tree holds"},
		"next inode number": {do: func(s *Store) { s.agNext[dirAG].Store(3) }, want: "next inode number 3"},
		"stream count": {do: func(s *Store) {
			s.ags[dirAG].moveStream(streamKey{}, streamKey{3, format.StreamSrcDir})
		}, want: "recorded for stream 3 (source 2)"},
		"stale stream count": {do: func(s *Store) {
			s.ags[0].moveStream(streamKey{}, streamKey{9, format.StreamSrcSet})
		}, want: "recorded for stream 9 (source 1)"},
		"malformed stream count": {do: func(s *Store) {
			s.trees[0].Put(append(format.StreamCountKey(4, 1), 0), put64(1))
		}, want: "malformed stream count"},
		"unknown AG key": {do: func(s *Store) { s.trees[1].Put([]byte{format.KeyAG, 0x09}, nil) }, want: "unknown key"},
		"unknown inode kind": {do: func(s *Store) {
			s.trees[0].Put(format.InoKindPrefix(RootIno, 0x0e), []byte{1})
		}, want: "unknown key"},
		"rotor out of range": {do: func(s *Store) { s.trees[0].Put(rotorKey, put32(77)) }, raw: true, want: "rotor beyond the last AG"},
		"rotor missing":      {do: func(s *Store) { s.trees[0].Delete(rotorKey) }, raw: true, want: "rotor missing"},
		"AG header missing":  {do: func(s *Store) { s.trees[dirAG].Delete(format.AGHeaderKey()) }, raw: true, want: "header missing"},
		"AG header malformed": {do: func(s *Store) {
			s.trees[dirAG].Put(format.AGHeaderKey(), []byte{1, 2, 3})
		}, raw: true, want: "AG header of 3 bytes"},
		"stream counts after a malformed one": {do: func(s *Store) {
			s.trees[dirAG].Put(format.StreamCountKey(3, 0), []byte{1})
			s.trees[dirAG].Put(format.StreamCountKey(3, 3), put64(5))
		}, raw: true, want: "recorded for stream 3 (source 3)"},
	}
	for name, c := range cases {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			p := damagedCopy(t, base, c.raw, c.do)
			fsckRepairCycle(t, p, c.want)
			fd := openImage(t, p)
			s, err := Open(fd, testOpts())
			if err != nil {
				t.Fatalf("mount after repair: %v", err)
			}
			if _, got := s.StreamFileSources(); !maps.Equal(got, want) {
				t.Fatalf("stream counts after repair %v, want %v", got, want)
			}
			readTree(t, s)
			// New inodes in the repaired AGs, and a new directory (rotor).
			d, _ := s.Lookup(s.Root(), "d")
			for i := 0; i < 3; i++ {
				mustCreate(t, s, d, "new"+itoa(uint64(i)))
			}
			if _, err := s.Create(s.Root(), "newdir", NewInode{Mode: syscall.S_IFDIR | 0o755}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			fd.Close()
			if rep := fsckRun(t, p, false); len(rep.Problems) != 0 {
				t.Fatalf("fsck after using the repaired filesystem: %q", rep.Problems)
			}
		})
	}
}

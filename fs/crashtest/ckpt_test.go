package crashtest

import (
	"strings"
	"syscall"
	"testing"

	"github.com/streamfs/streamfs/backend/faulty"
	"github.com/streamfs/streamfs/fs/meta"
)

// TestCrashCheckpointHeaderOnly is the smallest case of a crash state the
// enumeration found: power goes while a checkpoint writes its slot, and
// only the slot's first sector (the header) lands, not the roots after it.
// The checkpoint before it and the journal hold everything acknowledged,
// so fsck -n must report at most a note (an interrupted checkpoint), and
// the image must mount with the file.
func TestCrashCheckpointHeaderOnly(t *testing.T) {
	e := newEnv(t, nil)
	rec := faulty.NewRecorder(e.img.Clone())
	s, err := openStore(rec)
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.Create(s.Root(), "f", meta.NewInode{Mode: syscall.S_IFREG | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Fsync(in); err != nil {
		t.Fatal(err)
	}
	// The unmount's checkpoint: tree nodes, flush, slot, flush.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ops := rec.Ops()
	sb, _, err := meta.ReadSuper(e.img)
	if err != nil {
		t.Fatal(err)
	}
	bs := int64(sb.BlockSize)
	lo, hi := int64(sb.CkptStart)*bs, int64(sb.CkptStart+2*sb.CkptBlocks)*bs
	slot := -1
	for i, o := range ops {
		if o.Kind == faulty.RecWrite && o.Off >= lo && o.Off < hi {
			slot = i
		}
	}
	if slot < 0 || slot+1 >= len(ops) || ops[slot+1].Kind != faulty.RecFlush {
		t.Fatalf("no checkpoint slot write followed by a flush in the log")
	}
	cs := faulty.CrashState{At: slot + 1, Durable: slot, Land: []faulty.Landing{{Op: slot, Sectors: []int{0}}}, Variant: "torn"}
	img, err := faulty.NewReplayer(e.img, ops, sector).Image(cs)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := fsckImage(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Errorf("fsck -n of %v: %s (notes: %s)", cs, strings.Join(rep.Problems, "; "), strings.Join(rep.Notes, "; "))
	}
	s, err = openStore(img)
	if err != nil {
		t.Fatalf("mount %v: %v", cs, err)
	}
	defer s.Close()
	if _, err := s.Lookup(s.Root(), "f"); err != nil {
		t.Errorf("fsync'd file lost: %v", err)
	}
}

// TestCrashOracleCatchesLoss makes sure the checks are not vacuous: an
// image that lost acknowledged writes (the recording's start, judged as
// if the cut came at its end) must fail them.
func TestCrashOracleCatchesLoss(t *testing.T) {
	e := newEnv(t, b3Setup)
	for _, steps := range [][]op{
		{{kind: opCreate, path: "A/new"}, {kind: opFsync, path: "A/new"}},
		{{kind: opWrite, path: "A/foo", off: 1000, n: 100}, {kind: opFsync, path: "A/foo"}},
		{{kind: opWrite, path: "A/foo", rel: true, n: 100}, {kind: opFdatasync, path: "A/foo"}},
		{{kind: opSetxattr, path: "A/foo", name: "user.a", val: "1"}, {kind: opSync}},
	} {
		res, err := e.run(workload{steps: steps})
		if err != nil {
			t.Fatal(err)
		}
		c := newChecker(t, b3Enum())
		probs := c.checkImage(res, e.img.Clone(), res.windowAt(len(res.ops)))
		if len(probs) == 0 {
			t.Errorf("%v: losing it all went unnoticed", workload{steps: steps})
		}
		for _, p := range probs {
			t.Logf("%v: %s: %s", workload{steps: steps}, p.class, p.detail)
		}
	}
}

// Package fsck checks a streamfs filesystem that is not mounted, and with
// -y repairs it, as e2fsck and xfs_repair do. It loads the image the way a
// mount does (package meta, through the narrow interfaces in host.go: it
// never sees the Store), then holds what the trees say against itself: the
// superblock copies, the trees' structure, every extent (inside the data
// area, no two overlapping), the directory tree, link and block counts,
// stored POSIX ACLs, the free-space records and the AG counters. Repairs
// change the trees in memory; one new checkpoint makes them durable, or,
// when a problem is left that cannot be repaired, nothing is written.
package fsck

import (
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/format"
)

// Options select what Check does.
type Options struct {
	// Repair fixes what can be fixed in memory and writes the result as a
	// new checkpoint (fsck -y). Without it nothing is written (fsck -n).
	Repair bool
	Logger *zap.Logger
}

// Report is what Check found. Problems are errors; each one Check
// repaired is counted in Fixed too. Notes are not errors: leftovers of a
// crash that the next mount cleans up by design (orphans).
type Report struct {
	Problems []string
	Fixed    int
	Notes    []string

	Checkpoint      uint64 // sequence of the checkpoint loaded
	ReplayedCommits int
	Inodes          int
	Dirs, Files     int
	Orphans         int    // unlinked inodes the next mount frees
	UsedBlocks      uint64 // blocks tree nodes and files hold (zoned layout: tree nodes; Zones has the data)
	FreeBlocks      uint64 // on the zoned layout: of the conventional (metadata) space
	// Zones are the sequential zones of a zoned filesystem, with their
	// live and garbage blocks.
	Zones []ZoneUsage
	Wrote bool // a repaired checkpoint or superblock was written
}

// Exit statuses (as e2fsck's).
const (
	Clean       = 0
	Corrected   = 1
	Uncorrected = 4
	Operational = 8
	Usage       = 16
)

// ExitCode maps the report to e2fsck's exit status: 0 clean, 1 every
// error corrected, 4 errors left uncorrected.
func (r *Report) ExitCode() int {
	switch {
	case len(r.Problems) == 0:
		return Clean
	case r.Fixed >= len(r.Problems):
		return Corrected
	default:
		return Uncorrected
	}
}

// rootIno is the root directory's inode number.
const rootIno = 1

// Check checks the filesystem on dev, which the caller has opened with its
// exclusive lock (nothing may have it mounted). It loads the newest
// checkpoint and replays the journal in memory, then checks the superblock
// copies, every extent (inside the data area, no two overlapping), the
// directory tree (entries point at inodes, every directory reachable from
// the root exactly once, parent pointers, no cycles), link counts and the
// free-space accounting. With opts.Repair it fixes what it can and writes
// a new checkpoint. The error is for operational failures only (unreadable,
// foreign or newer-format device); metadata errors are in the report.
func Check(dev backend.Device, opts Options, host Host) (*Report, error) {
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	rep := &Report{}
	f := &fsck{rep: rep, repair: opts.Repair}
	sb, writeSuper, err := f.checkSuper(dev, host)
	if err != nil {
		return nil, err
	}
	if sb.ReadOnlyOnly() || sb.Compat&^format.CompatSupported != 0 {
		return nil, fmt.Errorf("filesystem has features %#x/%#x this fsck does not know: %w",
			sb.Compat, sb.ROCompat, format.ErrNewerFormat)
	}
	open := func() Image {
		f.img = host.Open(dev, sb, opts.Repair, log, f)
		return f.img
	}
	img := open()
	defer func() { f.img.Close() }()
	h, commits, err := img.Load()
	if err != nil && opts.Repair && errors.Is(err, format.ErrCorrupt) {
		// A tree node on the way of the load does not verify: start
		// again from the checkpoint, rebuilding the damaged trees.
		img.Close()
		rep.Problems, rep.Fixed, f.badHeader, f.badCommitSeen = nil, 0, nil, false
		img = open()
		h, commits, err = f.loadDamaged(err)
	}
	if err != nil {
		// Without readable trees there is nothing to repair from.
		hint := ""
		if !opts.Repair && errors.Is(err, format.ErrCorrupt) {
			hint = " (fsck -y rebuilds damaged trees from what is readable)"
		}
		f.problem(false, "loading metadata: %v%s", err, hint)
		return rep, nil
	}
	rep.Checkpoint, rep.ReplayedCommits = h.Seq, commits
	if interrupted, damage := img.SlotDamage(); damage != nil {
		if interrupted {
			f.rep.Notes = append(f.rep.Notes, fmt.Sprintf("a checkpoint was interrupted (%v); the checkpoint in use and the journal hold everything, and the next checkpoint rewrites the slot", damage))
		} else {
			f.problem(false, "%v", damage)
		}
	}
	f.checkTrees()
	if !opts.Repair || rep.Fixed == 0 {
		return rep, nil
	}
	if rep.Fixed < len(rep.Problems) {
		f.withdraw()
		return rep, nil
	}
	if writeSuper {
		if err := host.WriteSuper(dev, sb); err != nil {
			return nil, fmt.Errorf("rewriting superblocks: %w", err)
		}
	}
	if f.badCommitSeen {
		// The commits after the bad one are still in the journal: start the
		// sequence far beyond them so replay never reaches any of them.
		img.SkipSeq(1 << 32)
		f.fixes++
	}
	if f.fixes > 0 {
		if err := img.Checkpoint(); err != nil {
			return nil, fmt.Errorf("writing repaired checkpoint: %w", err)
		}
	}
	rep.Wrote = true
	return rep, nil
}

// fsck is one check run over a loaded image.
type fsck struct {
	img    Image
	rep    *Report
	repair bool
	fixes  int // repairs that need a checkpoint
	// badHeader lists the AGs whose header was missing or malformed.
	badHeader []int
	// badCommitSeen: the journal ends before a commit that does not decode.
	badCommitSeen bool
}

var _ = (Loader)((*fsck)(nil))

// BadCommit implements Loader.
func (f *fsck) BadCommit(err error) {
	f.badCommitSeen = f.problem(true, "%v: the journal ends before it", err)
}

// BadAGHeader implements Loader.
func (f *fsck) BadAGHeader(ag int, err error) {
	f.badHeader = append(f.badHeader, ag)
	f.problem(true, "%v: counters recounted from the tree", err)
}

// BeforeReplay implements Loader.
func (f *fsck) BeforeReplay() { f.reserveInUse() }

// withdraw takes back the repairs of a -y run that leaves a problem it
// cannot repair: nothing is written. A checkpoint built over such a
// problem (blocks two owners claim, a tree that does not verify) could
// place repaired metadata over data that is still in use, and would hide
// the damage from the next run; the report keeps every problem and exits 4.
func (f *fsck) withdraw() {
	withdrawn := 0
	for i, p := range f.rep.Problems {
		if m, ok := strings.CutSuffix(p, " (fixed)"); ok {
			f.rep.Problems[i] = m + " (repairable, not written)"
			withdrawn++
		}
	}
	f.rep.Fixed = 0
	f.rep.Notes = append(f.rep.Notes, fmt.Sprintf("nothing written: %d problems cannot be repaired automatically, so the %d repairs found were not applied",
		len(f.rep.Problems)-withdrawn, withdrawn))
}

// problem reports an error. It returns true when the caller should repair
// it: in repair mode and when the problem is fixable.
func (f *fsck) problem(fixable bool, msg string, a ...any) bool {
	m := fmt.Sprintf(msg, a...)
	fix := f.repair && fixable
	if fix {
		m += " (fixed)"
		f.rep.Fixed++
	}
	f.rep.Problems = append(f.rep.Problems, m)
	return fix
}

// checkSuper compares the primary superblock with the backup. It returns
// the superblock to use and whether both copies must be rewritten.
func (f *fsck) checkSuper(dev backend.Device, host Host) (*format.Super, bool, error) {
	if dev.Size() < format.SuperSize {
		_, err := host.ReadSuper(dev) // explains that the device is too small
		return nil, false, err
	}
	buf := make([]byte, format.SuperSize)
	if err := dev.ReadAt(buf, 0); err != nil {
		return nil, false, fmt.Errorf("reading superblock: %w", err)
	}
	primary, perr := format.DecodeSuper(buf)
	if perr == nil && primary.TotalBlocks*uint64(primary.BlockSize) > uint64(dev.Size()) {
		perr = fmt.Errorf("superblock says %d bytes, device has %d: %w",
			primary.TotalBlocks*uint64(primary.BlockSize), dev.Size(), format.ErrCorrupt)
	}
	if perr != nil {
		if errors.Is(perr, format.ErrNewerFormat) {
			return nil, false, perr
		}
		sb, err := host.ReadSuper(dev)
		if err != nil {
			return nil, false, err
		}
		fix := f.problem(true, "primary superblock: %v; the backup copy is good", perr)
		return sb, fix, nil
	}
	bb := make([]byte, format.SuperSize)
	if err := dev.ReadAt(bb, int64(primary.BackupBlock*uint64(primary.BlockSize))); err != nil {
		return nil, false, fmt.Errorf("reading backup superblock: %w", err)
	}
	backup, berr := format.DecodeSuper(bb)
	switch {
	case berr != nil:
		return primary, f.problem(true, "backup superblock: %v", berr), nil
	case *backup != *primary:
		return primary, f.problem(true, "backup superblock differs from the primary"), nil
	}
	return primary, false, nil
}

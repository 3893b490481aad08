package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/meta"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

// fsckFlags defines fsck's flags.
func fsckFlags(stderr io.Writer) (f *flag.FlagSet, no, yes, verbose *bool, kind, metaDev *string) {
	f = newFlags("fsck", stderr)
	verbose = f.Bool("v", false, "verbose: on a zoned filesystem, each sequential zone's written, live and garbage blocks")
	no = f.Bool("n", false, "check only: open the device read-only and change nothing (the default)")
	yes = f.Bool("y", false, "repair every problem that can be repaired")
	// e2fsck habits: -p (preen) repairs what is safe, which here is every
	// repair; -f forces a full check, which every check is.
	f.BoolVar(yes, "p", false, "the same as -y (e2fsck's preen: every streamfs repair is automatic)")
	_ = f.Bool("f", false, "accepted for e2fsck habits: every check is a full check")
	kind = f.String("backend", "", "force a backend: `KIND` is file, block, nvme, zns, ftl or zoned (default: by what PATH is)")
	metaDev = f.String("metadev", "", "the metadata device `METADEV` of a filesystem made with mkfs --metadev (PATH is its zoned data device)")
	return f, no, yes, verbose, kind, metaDev
}

// Fsck implements `streamfs fsck [-n] [-y] [-v] PATH`. It checks an unmounted
// device or image: -n (the default) only reports and opens the device
// read-only; -y repairs what it can and writes a new checkpoint. The exit
// status is e2fsck's: 0 clean, 1 errors corrected, 4 errors left
// uncorrected, 8 operational error, 16 usage error.
func Fsck(args []string, stdout, stderr io.Writer) int {
	f, no, yes, verbose, kind, metaDev := fsckFlags(stderr)
	pos, err := parseFlags(f, args)
	if err != nil {
		return fsck.Usage
	}
	if len(pos) != 1 || (*no && *yes) {
		fmt.Fprintln(stderr, usageLine("fsck"))
		if *no && *yes {
			fmt.Fprintln(stderr, "streamfs fsck: -n and -y exclude each other")
		}
		return fsck.Usage
	}
	path := pos[0]
	if isDir(path) {
		fmt.Fprintf(stderr, "streamfs fsck: %s is a directory; give the device or image file\n", path)
		return fsck.Operational
	}
	if mounted, _ := backend.IsMounted(path); mounted {
		if live, dead := streamfsMounts(path); len(live) == 0 && len(dead) > 0 {
			fmt.Fprintf(stderr, "streamfs fsck: %s is still mounted on %s, a dead FUSE mount (its daemon died); clear it with: umount -l %s\n",
				path, dead[0], dead[0])
		} else {
			fmt.Fprintf(stderr, "streamfs fsck: %s is mounted; unmount it first\n", path)
		}
		return fsck.Operational
	}
	if *metaDev != "" {
		if mounted, _ := backend.IsMounted(*metaDev); mounted {
			fmt.Fprintf(stderr, "streamfs fsck: metadata device %s is mounted; unmount it first\n", *metaDev)
			return fsck.Operational
		}
	}
	// The device's exclusive lock keeps a streamfs daemon out (ErrBusy).
	dev, err := openWaiting(path, backend.OpenOptions{ReadOnly: !*yes, Kind: *kind, MetaPath: *metaDev}, stderr, "fsck")
	if err != nil {
		if errors.Is(err, backend.ErrBusy) {
			fmt.Fprintf(stderr, "streamfs fsck: %s: %v\n", path, err)
		} else {
			fmt.Fprintf(stderr, "streamfs fsck: %v\n", err)
		}
		return fsck.Operational
	}
	defer dev.Close()
	rep, err := meta.Fsck(dev, fsck.Options{Repair: *yes})
	if err != nil {
		fmt.Fprintf(stderr, "streamfs fsck: %s: %v\n", path, err)
		return fsck.Operational
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(stdout, "%s: %s\n", path, p)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "%s: note: %s\n", path, n)
	}
	fmt.Fprintf(stdout, "%s: checkpoint %d + %d journal commits; %d inodes (%d directories, %d files), %d blocks used, %d free\n",
		path, rep.Checkpoint, rep.ReplayedCommits, rep.Inodes, rep.Dirs, rep.Files, rep.UsedBlocks, rep.FreeBlocks)
	printZones(stdout, path, rep, *verbose)
	code := rep.ExitCode()
	switch code {
	case fsck.Clean:
		fmt.Fprintf(stdout, "%s: clean\n", path)
	case fsck.Corrected:
		fmt.Fprintf(stdout, "%s: %d errors corrected; filesystem modified\n", path, rep.Fixed)
	default:
		left := len(rep.Problems) - rep.Fixed
		hint := ""
		if !*yes {
			hint = " (run streamfs fsck -y to repair)"
		}
		fmt.Fprintf(stdout, "%s: %d errors left uncorrected%s\n", path, left, hint)
	}
	return code
}

// printZones prints a zoned filesystem's sequential zones: a summary line,
// and with verbose one line per zone that is not empty.
func printZones(w io.Writer, path string, rep *fsck.Report, verbose bool) {
	if len(rep.Zones) == 0 {
		return
	}
	var empty, garbageZones int
	var live, garbage uint64
	for _, z := range rep.Zones {
		live, garbage = live+z.Live, garbage+z.Garbage
		if z.Written == 0 {
			empty++
		}
		if z.Garbage > 0 {
			garbageZones++
		}
	}
	fmt.Fprintf(w, "%s: %d sequential zones (%d empty): %d blocks live, %d blocks of garbage in %d zones (reclaimable)\n",
		path, len(rep.Zones), empty, live, garbage, garbageZones)
	if !verbose {
		return
	}
	fmt.Fprintf(w, "%6s %12s %-14s %10s %10s %10s\n", "ZONE", "START-BLOCK", "COND", "WRITTEN", "LIVE", "GARBAGE")
	for _, z := range rep.Zones {
		if z.Written == 0 {
			continue // the summary counts the empty ones
		}
		fmt.Fprintf(w, "%6d %12d %-14s %10d %10d %10d\n", z.Zone, z.Start, z.Cond, z.Written, z.Live, z.Garbage)
	}
}

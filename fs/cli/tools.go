package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/ioctl"
)

// queryFile opens path read-only and reads a query document from the daemon.
func queryFile(path string, kind uint32) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	doc, err := ioctl.Query(fh.Fd(), kind)
	if err != nil {
		if st, serr := fh.Stat(); serr == nil && st.IsDir() && kind == ioctl.QueryBmap && errors.Is(err, syscall.EINVAL) {
			return nil, fmt.Errorf("%s is a directory: bmap maps a regular file's blocks", path)
		}
		if errors.Is(err, syscall.ENOTTY) {
			return nil, fmt.Errorf("%s: not on a streamfs mount: %w", path, err)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

// Bmap implements `streamfs bmap [--json] FILE`, like xfs_bmap -v.
func Bmap(args []string, stdout, stderr io.Writer) int {
	f := newFlags("bmap", stderr)
	asJSON := f.Bool("json", false, "print JSON")
	// xfs_bmap's -v: the output is always the verbose form.
	_ = f.Bool("v", false, "verbose (accepted; always on)")
	pos, err := parseFlags(f, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: streamfs bmap [-v] [--json] FILE")
		return exitUsage
	}
	doc, err := queryFile(pos[0], ioctl.QueryBmap)
	if err != nil {
		return fail(stderr, "bmap", err)
	}
	if *asJSON {
		fmt.Fprintln(stdout, string(doc))
		return exitOK
	}
	var b sfs.BmapDoc
	if err := json.Unmarshal(doc, &b); err != nil {
		return fail(stderr, "bmap", err)
	}
	fmt.Fprintf(stdout, "%s:\n", pos[0])
	fmt.Fprintf(stdout, " %4s %-24s %-24s %4s %6s %s\n", "EXT", "FILE-OFFSET", "BLOCK-RANGE", "AG", "STREAM", "FLAGS")
	// Like xfs_bmap, ranges are in 512-byte units.
	for i, e := range b.Extents {
		s := e.Block * uint64(b.BlockSize) / 512
		fo := e.Offset / 512
		n := e.Length / 512
		flags := ""
		if e.Unwritten {
			flags = "unwritten"
		}
		fmt.Fprintf(stdout, " %4d %-24s %-24s %4d %6d %s\n", i,
			fmt.Sprintf("[%d..%d]:", fo, fo+n-1), fmt.Sprintf("%d..%d", s, s+n-1), e.AG, e.Stream, flags)
	}
	return exitOK
}

// Stats implements `streamfs stats [--json] MOUNTPOINT`.
func Stats(args []string, stdout, stderr io.Writer) int {
	f := newFlags("stats", stderr)
	asJSON := f.Bool("json", false, "print JSON")
	pos, err := parseFlags(f, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "usage: streamfs stats [--json] MOUNTPOINT")
		return exitUsage
	}
	doc, err := queryFile(pos[0], ioctl.QueryStats)
	if err != nil {
		return fail(stderr, "stats", err)
	}
	if *asJSON {
		fmt.Fprintln(stdout, string(doc))
		return exitOK
	}
	var s sfs.StatsDoc
	if err := json.Unmarshal(doc, &s); err != nil {
		return fail(stderr, "stats", err)
	}
	fmt.Fprintf(stdout, "placement=%s max_streams=%d hw_streams=%d backend=%s\n", s.Policy, s.MaxStreams, s.HWStreams, s.Backend)
	fmt.Fprintf(stdout, "placement cache: %s hits=%d misses=%d\n", onOff(s.PlacementCache), s.CacheHits, s.CacheMisses)
	c := s.Counters
	fmt.Fprintf(stdout, "checkpoints=%d (last %d bytes, longest pause %d us) data_io_errors=%d read_only=%v shutdown=%v node_cache hits=%d misses=%d\n",
		c.Checkpoints, c.CheckpointPayload, c.CheckpointPauseMax, c.DataIOErrors, c.ReadOnly, c.Shutdown, c.CacheHits, c.CacheMisses)
	fmt.Fprintf(stdout, "%4s %12s %12s %10s %10s\n", "AG", "SIZE", "FREE", "ALLOCS", "LOCKWAITS")
	for _, a := range s.AGs {
		fmt.Fprintf(stdout, "%4d %12d %12d %10d %10d\n", a.Index, a.Size, a.Free, a.Allocs, a.LockWaits)
	}
	fmt.Fprintf(stdout, "%6s %10s %14s %12s\n", "STREAM", "FILES", "BYTES", "BLOCKS")
	for _, st := range s.Streams {
		fmt.Fprintf(stdout, "%6d %10d %14d %12d\n", st.Stream, st.Files, st.BytesWritten, st.Blocks)
	}
	if s.FDPError != "" {
		fmt.Fprintf(stdout, "fdp: %s\n", s.FDPError)
	}
	if f := s.FDP; f != nil {
		fmt.Fprintf(stdout, "fdp: host_bytes_written=%d media_bytes_written=%d waf=%.3f\n", f.HostBytesWritten, f.MediaBytesWritten, f.WAF)
		fmt.Fprintf(stdout, "%6s %6s %6s %16s\n", "PID", "RUHID", "STREAM", "AVAILABLE-BYTES")
		for _, h := range f.Handles {
			fmt.Fprintf(stdout, "%6d %6d %6d %16d\n", h.PID, h.RUHID, h.Stream, h.AvailableBytes)
		}
	}
	return exitOK
}

// onOff prints a switch the way its mount option spells it.
func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/streamfs/streamfs/backend/nvme"

	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/fs/meta"
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

// bmapFlags defines bmap's flags.
func bmapFlags(stderr io.Writer) (*flag.FlagSet, *bool) {
	f := newFlags("bmap", stderr)
	asJSON := f.Bool("json", false, "print the extents as JSON")
	// xfs_bmap's -v: the output is always the verbose form.
	_ = f.Bool("v", false, "accepted for xfs_bmap habits: the output is always the verbose form")
	return f, asJSON
}

// Bmap implements `streamfs bmap [--json] FILE`, like xfs_bmap -v.
func Bmap(args []string, stdout, stderr io.Writer) int {
	f, asJSON := bmapFlags(stderr)
	pos, err := parseFlags(f, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, usageLine("bmap"))
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
	// On the zoned layout data lies in zones, not AGs.
	where := "AG"
	if len(b.Extents) > 0 && b.Extents[0].Zone != nil {
		where = "ZONE"
	}
	fmt.Fprintf(stdout, " %4s %-24s %-24s %4s %6s %s\n", "EXT", "FILE-OFFSET", "BLOCK-RANGE", where, "STREAM", "FLAGS")
	// Like xfs_bmap, ranges are in 512-byte units.
	for i, e := range b.Extents {
		s := e.Block * uint64(b.BlockSize) / 512
		fo := e.Offset / 512
		n := e.Length / 512
		flags := ""
		if e.Unwritten {
			flags = "unwritten"
		}
		var at uint64
		switch {
		case e.Zone != nil:
			at = *e.Zone
		case e.AG != nil:
			at = uint64(*e.AG)
		}
		fmt.Fprintf(stdout, " %4d %-24s %-24s %4d %6d %s\n", i,
			fmt.Sprintf("[%d..%d]:", fo, fo+n-1), fmt.Sprintf("%d..%d", s, s+n-1), at, e.Stream, flags)
	}
	return exitOK
}

// statsArgs are stats's flags.
type statsArgs struct {
	json     bool
	interval float64
	count    int
}

// statsFlags defines stats's flags.
func statsFlags(stderr io.Writer) (*flag.FlagSet, *statsArgs) {
	f, a := newFlags("stats", stderr), &statsArgs{}
	f.BoolVar(&a.json, "json", false, "print the counters as JSON")
	f.Float64Var(&a.interval, "interval", 0, "every `SECONDS`, print the write amplification of the interval just past")
	f.IntVar(&a.count, "count", 0, "with --interval: stop after `N` intervals (default: until interrupted)")
	return f, a
}

// Stats implements `streamfs stats [--json] [--interval SECONDS [--count N]]
// MOUNTPOINT`. With --interval it prints, every interval, the write
// amplification of the interval just past (drive and per handle) next to
// the cumulative one, so a run can be watched while it goes.
func Stats(args []string, stdout, stderr io.Writer) int {
	f, a := statsFlags(stderr)
	asJSON, interval, count := &a.json, &a.interval, &a.count
	pos, err := parseFlags(f, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 || *interval < 0 || (*interval > 0 && *asJSON) {
		fmt.Fprintln(stderr, usageLine("stats"))
		return exitUsage
	}
	if *interval > 0 {
		return watchStats(pos[0], time.Duration(*interval*float64(time.Second)), *count, stdout, stderr)
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
	fmt.Fprintf(stdout, "transport: %s\n", s.Transport)
	c := s.Counters
	fmt.Fprintf(stdout, "checkpoints=%d (last %d bytes, longest pause %d us) data_io_errors=%d read_only=%v shutdown=%v node_cache hits=%d misses=%d\n",
		c.Checkpoints, c.CheckpointPayload, c.CheckpointPauseMax, c.DataIOErrors, c.ReadOnly, c.Shutdown, c.CacheHits, c.CacheMisses)
	fmt.Fprintf(stdout, "%4s %12s %12s %10s %10s\n", "AG", "SIZE", "FREE", "ALLOCS", "LOCKWAITS")
	for _, a := range s.AGs {
		fmt.Fprintf(stdout, "%4d %12d %12d %10d %10d\n", a.Index, a.Size, a.Free, a.Allocs, a.LockWaits)
	}
	printStreams(stdout, s.Streams)
	if s.Zones != nil {
		printZoneCounters(stdout, s.Zones)
	}
	if s.FDPError != "" {
		fmt.Fprintf(stdout, "fdp: %s\n", s.FDPError)
	}
	if f := s.FDP; f != nil {
		fmt.Fprintf(stdout, "fdp: host_bytes_written=%d media_bytes_written=%d media_bytes_erased=%d waf=%.3f\n",
			f.HostBytesWritten, f.MediaBytesWritten, f.MediaBytesErased, f.WAF)
		if f.ModelError != "" {
			fmt.Fprintf(stdout, "fdp: model error: %s\n", f.ModelError)
		}
		fmt.Fprintf(stdout, "%6s %6s %6s %16s %16s %16s %7s\n", "PID", "RUHID", "STREAM", "AVAILABLE-BYTES", "HOST-BYTES", "MEDIA-BYTES", "WAF")
		for _, h := range f.Handles {
			fmt.Fprintf(stdout, "%6d %6d %6d %16d %16d %16d %7.3f\n", h.PID, h.RUHID, h.Stream, h.AvailableBytes, h.HostBytes, h.MediaBytes, h.WAF)
		}
	}
	return exitOK
}

// printZoneCounters prints the zoned layout's counters: space in blocks,
// the allocator, reclaim, seed 2's inode-to-zone cache and, per stream,
// the bytes writes and reclaim wrote.
func printZoneCounters(w io.Writer, z *meta.ZoneCounters) {
	sp, a := z.Space, z.Alloc
	fmt.Fprintf(w, "zones: free=%d (%d blocks) open_room=%d live=%d garbage=%d reclaimable=%d reserve=%d avail=%d total=%d blocks\n",
		sp.FreeZones, sp.FreeBlocks, sp.OpenRoom, sp.Live, sp.Garbage, sp.Reclaimable, sp.Reserve, sp.Avail, sp.Total)
	fmt.Fprintf(w, "zones: streams=%d slots=%d active=%d waits=%d finish_errors=%d; reclaim victims=%d resets=%d failures=%d\n",
		a.Streams, a.Slots, a.Active, a.Waits, a.FinishErrors, z.Victims, z.Resets, z.ReclaimFails)
	fmt.Fprintf(w, "zone cache: hits=%d misses=%d stale=%d\n", a.CacheHits, a.CacheMisses, a.CacheStale)
	fmt.Fprintf(w, "%6s %16s %16s %7s\n", "STREAM", "WRITTEN-BYTES", "RECLAIMED-BYTES", "WAF")
	ids := make([]uint32, 0, len(z.Streams))
	for id := range z.Streams {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st := z.Streams[id]
		fmt.Fprintf(w, "%6d %16d %16d %7.3f\n", id, st.WrittenBytes, st.ReclaimedBytes, st.WriteAmp)
	}
	fmt.Fprintf(w, "%6s %16d %16d %7.3f\n", "all", z.WrittenBytes, z.ReclaimedBytes, z.WriteAmp)
}

// onOff prints a switch the way its mount option spells it.
func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"

}

// printStreams prints the per-stream table, with where files' streams
// came from when the daemon reports it.
func printStreams(w io.Writer, streams []sfs.StreamStats) {
	fmt.Fprintf(w, "%6s %10s %14s %12s  %s\n", "STREAM", "FILES", "BYTES", "BLOCKS", "SOURCES (set/dir/rule)")
	for _, st := range streams {
		fmt.Fprintf(w, "%6d %10d %14d %12d  %d/%d/%d\n", st.Stream, st.Files, st.BytesWritten, st.Blocks,
			st.FromSet, st.FromDir, st.FromRule)
	}
}

// watchStats polls the stats document and prints interval deltas.
func watchStats(mnt string, every time.Duration, count int, stdout, stderr io.Writer) int {
	read := func() (*nvme.FDPStats, error) {
		doc, err := queryFile(mnt, ioctl.QueryStats)
		if err != nil {
			return nil, err
		}
		var s sfs.StatsDoc
		if err := json.Unmarshal(doc, &s); err != nil {
			return nil, err
		}
		if s.FDP == nil {
			msg := "the device keeps no write counters (backend " + s.Backend + ")"
			if s.FDPError != "" {
				msg = s.FDPError
			}
			return nil, fmt.Errorf("%s: %s", mnt, msg)
		}
		if s.FDP.ModelError != "" {
			fmt.Fprintf(stderr, "streamfs stats: model error: %s\n", s.FDP.ModelError)
		}
		return s.FDP, nil
	}
	prev, err := read()
	if err != nil {
		return fail(stderr, "stats", err)
	}
	fmt.Fprintf(stdout, "%8s %14s %8s %8s  %s\n", "TIME", "HOST-BYTES", "WAF", "WAF-ALL", "HANDLE WAF (interval)")
	for i := 0; count == 0 || i < count; i++ {
		time.Sleep(every)
		cur, err := read()
		if err != nil {
			return fail(stderr, "stats", err)
		}
		line := fmt.Sprintf("%8s %14d %8s %8.3f ", time.Now().Format("15:04:05"), cur.HostBytesWritten-prev.HostBytesWritten,
			intervalWAF(prev.HostBytesWritten, cur.HostBytesWritten, prev.MediaBytesWritten, cur.MediaBytesWritten), cur.WAF)
		for j, h := range cur.Handles {
			if j < len(prev.Handles) && h.HostBytes > prev.Handles[j].HostBytes {
				line += fmt.Sprintf(" h%d=%s", j+1, intervalWAF(prev.Handles[j].HostBytes, h.HostBytes, prev.Handles[j].MediaBytes, h.MediaBytes))
			}
		}
		fmt.Fprintln(stdout, line)
		prev = cur
	}
	return exitOK
}

// intervalWAF formats (media1-media0)/(host1-host0), "-" without host writes.
func intervalWAF(host0, host1, media0, media1 uint64) string {
	if host1 <= host0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(media1-media0)/float64(host1-host0))
}

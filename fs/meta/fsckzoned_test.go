package meta

import (
	"bytes"
	"strings"
	"testing"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/fs/meta/fsck"
)

func fsckZoned(t *testing.T, path string, repair bool) *fsck.Report {
	t.Helper()
	return fsckOn(t, openZoned(t, path), repair)
}

// fsck on a real zoned image: clean after writes and overwrites (the
// overwritten blocks are garbage, reported as reclaimable); after a zone
// holding a file's data is reset behind the filesystem's back, -n reports
// the extents past the write pointer, -y drops them, the next run is
// clean and the filesystem mounts with a hole where the data was.
func TestFsckZoned(t *testing.T) {
	path := newZonedImage(t, 8)
	s, dev := openZonedStore(t, path)
	data := bytes.Repeat([]byte("zoned fsck "), 30000)
	f := mustCreate(t, s, s.Root(), "f")
	mustWrite(t, s, f, data, 0)
	mustWrite(t, s, f, []byte("overwritten"), 5000) // out of place: garbage
	copy(data[5000:], "overwritten")
	exts, err := s.Extents(f)
	if err != nil {
		t.Fatal(err)
	}
	closeZoned(t, s, dev)

	rep := fsckZoned(t, path, false)
	if rep.ExitCode() != fsck.Clean || !strings.Contains(strings.Join(rep.Notes, "\n"), "blocks of garbage") {
		t.Fatalf("fsck -n: exit %d: problems %q notes %q", rep.ExitCode(), rep.Problems, rep.Notes)
	}
	var live, garbage, mapped uint64
	for _, z := range rep.Zones {
		live, garbage = live+z.Live, garbage+z.Garbage
	}
	for _, x := range exts {
		mapped += x.Len
	}
	if live != mapped || garbage == 0 {
		t.Fatalf("zones: %d live, %d garbage blocks; the file maps %d", live, garbage, mapped)
	}

	// Reset the zone of the file's last extent.
	last := exts[len(exts)-1]
	sb := s.sb
	zoneStart := sb.DataStart + (last.PBlk-sb.DataStart)/sb.ZoneBlocks*sb.ZoneBlocks
	zd := openZoned(t, path)
	if err := zd.ZoneMgmt(backend.ZoneOpReset, int64(zoneStart*uint64(sb.BlockSize))); err != nil {
		t.Fatal(err)
	}
	if err := zd.Close(); err != nil {
		t.Fatal(err)
	}
	rep = fsckZoned(t, path, false)
	if rep.ExitCode() != fsck.Uncorrected || !strings.Contains(strings.Join(rep.Problems, "\n"), "lies past the write pointer of zone") {
		t.Fatalf("fsck -n after the reset: exit %d: %q", rep.ExitCode(), rep.Problems)
	}
	rep = fsckZoned(t, path, true)
	if rep.ExitCode() != fsck.Corrected || !rep.Wrote {
		t.Fatalf("fsck -y: exit %d (wrote %v): %q", rep.ExitCode(), rep.Wrote, rep.Problems)
	}
	if rep = fsckZoned(t, path, false); len(rep.Problems) != 0 {
		t.Fatalf("fsck after repair: %q", rep.Problems)
	}

	s, dev = openZonedStore(t, path)
	defer closeZoned(t, s, dev)
	f, err = s.Lookup(s.Root(), "f")
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, s, f)
	bs := uint64(sb.BlockSize)
	for _, x := range exts { // every extent in the reset zone is dropped
		if x.PBlk >= zoneStart && x.PBlk < zoneStart+sb.ZoneBlocks {
			clear(data[x.LBlk*bs : min(uint64(len(data)), (x.LBlk+x.Len)*bs)])
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("after repair the file differs at %d", firstDiff(got, data))
	}
}

package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/ftl"
	"github.com/streamfs/streamfs/backend/nvme"
	"github.com/streamfs/streamfs/backend/zoned"
	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/fs/meta"
	"github.com/streamfs/streamfs/ioctl"
)

// Info implements `streamfs info`: geometry, like xfs_info. A mount point
// is asked through the query ioctl; a device or image is read directly
// (read-only; it works while the device is mounted too).
func Info(args []string, stdout, stderr io.Writer) int {
	f, asJSON, metaDev := infoFlags(stderr)
	pos, err := parseFlags(f, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, usageLine("info"))
		return exitUsage
	}
	info, err := readInfo(pos[0], *metaDev)
	if err != nil {
		return fail(stderr, "info", err)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(info, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	printInfo(stdout, pos[0], info)
	return exitOK
}

// infoFlags defines info's flags.
func infoFlags(stderr io.Writer) (f *flag.FlagSet, asJSON *bool, metaDev *string) {
	f = newFlags("info", stderr)
	asJSON = f.Bool("json", false, "print the geometry as JSON")
	metaDev = f.String("metadev", "", "the metadata device `METADEV` of a filesystem made with mkfs --metadev: the superblock is read there")
	return f, asJSON, metaDev
}

// readInfo reads the geometry of the mount point or device at path; a
// device made with mkfs --metadev has its superblock on metaDev.
func readInfo(path, metaDev string) (sfs.InfoDoc, error) {
	var info sfs.InfoDoc
	if isDir(path) {
		fh, err := os.Open(path)
		if err != nil {
			return info, err
		}
		defer fh.Close()
		doc, err := ioctl.Query(fh.Fd(), ioctl.QueryInfo)
		if err != nil {
			return info, fmt.Errorf("%s: not a streamfs mount point: %w", path, err)
		}
		return info, json.Unmarshal(doc, &info)
	}
	// Read the superblock without taking the device's lock.
	fh, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer fh.Close()
	sbPath, sbFile := path, fh
	if metaDev != "" {
		if sbFile, err = os.Open(metaDev); err != nil {
			return info, fmt.Errorf("metadata device: %w", err)
		}
		defer sbFile.Close()
		sbPath = metaDev
	}
	sb, backup, err := meta.ReadSuper(rawDevice{sbFile})
	if err != nil {
		return info, fmt.Errorf("%s: %w", sbPath, err)
	}
	if backup {
		fmt.Fprintf(os.Stderr, "streamfs info: %s: primary superblock is corrupt; showing the backup copy\n", sbPath)
	}
	info.Info = sb.Info()
	if l, ok, err := ftl.ReadLabel(path); err == nil && ok {
		info.Model = &l
		info.Backend = "ftl"
	}
	// An emulated zoned image shows its zones (read from its label and
	// state without the device's lock, as the superblock is).
	if d, ok, err := zoned.Load(rawDevice{fh}, true); err == nil && ok {
		info.ZoneGeometry = sfs.ZoneGeometryOf(d)
		info.Backend = d.Kind()
	}
	// An NVMe namespace that is not mounted can show its FDP setup too.
	if d, err := nvme.Open(path, true); err == nil {
		fi := d.FDPInfo()
		info.FDP = &fi
		info.Backend = d.Kind()
		d.Close()
	}
	return info, nil
}

func printInfo(w io.Writer, path string, d sfs.InfoDoc) {
	i := d.Info
	fmt.Fprintf(w, "meta-data=%-22s uuid=%s label=%q\n", path, i.UUID, i.Label)
	fmt.Fprintf(w, "         =%-22s agcount=%d, agsize=%d blks\n", "", i.AGCount, i.AGBlocks)
	fmt.Fprintf(w, "data     =%-22s bsize=%d blocks=%d (%d MiB), first data block=%d\n", "", i.BlockSize, i.TotalBlocks, i.SizeBytes>>20, i.DataStart)
	fmt.Fprintf(w, "log      =internal %-13s blocks=%d at %d\n", "", i.JournalBlocks, i.JournalStart)
	fmt.Fprintf(w, "checkpt  =2 slots %-14s blocks=%d each at %d\n", "", i.CkptBlocks, i.CkptStart)
	fmt.Fprintf(w, "backup   =superblock %-11s block=%d; version=%d features=%#x/%#x/%#x\n", "", i.BackupBlock, i.Version, i.Compat, i.ROCompat, i.Incompat)
	if d.Backend != "" {
		fmt.Fprintf(w, "backend  =%s\n", d.Backend)
	}
	if f := d.FDP; f != nil {
		fmt.Fprintf(w, "fdp      =enabled=%v config=%d reclaim_groups=%d handles=%d ru_size=%d placement_ids=%v\n",
			f.Enabled, f.ConfigIndex, f.ReclaimGroups, f.ReclaimUnitHandles, f.ReclaimUnitSize, f.PlacementIDs)
	}
	if i.Zoned {
		fmt.Fprintf(w, "zones    =sequential=%-12d zone=%d blks (%d MiB), cap=%d blks (%d MiB), from block %d; data=%d MiB\n",
			i.Zones, i.ZoneBlocks, i.ZoneBlocks*uint64(i.BlockSize)>>20, i.ZoneCap, i.ZoneCap*uint64(i.BlockSize)>>20, i.ZoneStart, i.ZonedBytes>>20)
	}
	if g := d.ZoneGeometry; g != nil {
		fmt.Fprintf(w, "         =conventional=%-10d zones=%d, max_open=%s max_active=%s\n",
			g.Conventional, g.Zones, zoneLimit(g.MaxOpen), zoneLimit(g.MaxActive))
	}
	if m := d.Model; m != nil {
		fmt.Fprintf(w, "ftl      =model %-17s %s logical=%d MiB physical=%d MiB reclaim_units=%d\n",
			"", m.Geometry, m.Logical>>20, m.Physical>>20, m.Units)
	}
}

// zoneLimit prints an open or active zone limit (0: none).
func zoneLimit(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

// rawDevice reads an image or device without locking it (info only).
type rawDevice struct{ f *os.File }

func (r rawDevice) ReadAt(p []byte, off int64) error {
	_, err := r.f.ReadAt(p, off)
	return err
}
func (r rawDevice) WriteAt([]byte, int64, uint32) error { return os.ErrPermission }
func (r rawDevice) Flush() error                        { return nil }
func (r rawDevice) Discard(int64, int64) error          { return nil }
func (r rawDevice) Size() int64 {
	n, _ := r.f.Seek(0, io.SeekEnd)
	return n
}
func (r rawDevice) SectorSize() int    { return 512 }
func (r rawDevice) MaxStreams() uint32 { return 0 }
func (r rawDevice) Kind() string       { return "raw" }
func (r rawDevice) Close() error       { return nil }

var _ backend.Device = rawDevice{}

package zoned

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

// BenchmarkSeqWrite writes 128 KiB pieces sequentially with a Flush every
// 1 MiB (a journal commit's rhythm), on a plain image and on a zoned one
// over the same kind of file: the ratio is what the zone rules and the
// write pointer saves cost. Both start over at the end, the zoned image by
// resets, the plain one by discarding the same space. STREAMFS_BENCH_DIR picks the directory
// (tmpfs keeps the device out of the measurement).
func BenchmarkSeqWrite(b *testing.B) {
	const piece, perFlush, size = 128 << 10, 8, 256 << 20
	dir := os.Getenv("STREAMFS_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	g := Geometry{ZoneSize: 16 << 20, Conv: 1, MaxOpen: 4, MaxActive: 4, Sector: 4096}
	open := func(b *testing.B, zoned bool) (backend.Device, int64) {
		p := filepath.Join(dir, "bench.img")
		os.Remove(p)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.Remove(p) })
		if err := os.Truncate(p, size); err != nil {
			b.Fatal(err)
		}
		if !zoned {
			f, err := backend.OpenFile(p, false)
			if err != nil {
				b.Fatal(err)
			}
			return f, g.ZoneSize
		}
		if _, err := FormatFile(p, g); err != nil {
			b.Fatal(err)
		}
		d, _, err := Open(p, false)
		if err != nil {
			b.Fatal(err)
		}
		return d, g.ZoneSize
	}
	for _, zoned := range []bool{false, true} {
		name := "file"
		if zoned {
			name = "zoned"
		}
		b.Run(name, func(b *testing.B) {
			d, start := open(b, zoned)
			defer d.Close()
			buf := backend.AlignedBuf(piece)
			z, _ := d.(*Device)
			off := start
			b.SetBytes(piece)
			for i := 0; b.Loop(); i++ {
				if off+piece > d.Size() {
					// Start over: reset the zones, or discard the
					// same space of the plain image, so both write
					// into freshly released space.
					for zs := start; zs+g.ZoneSize <= d.Size(); zs += g.ZoneSize {
						var err error
						if z != nil {
							err = z.ZoneMgmt(backend.ZoneOpReset, zs)
						} else {
							err = d.Discard(zs, g.ZoneSize)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					off = start
				}
				if err := d.WriteAt(buf, off, 0); err != nil {
					b.Fatal(err)
				}
				off += piece
				if i%perFlush == perFlush-1 {
					if err := d.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

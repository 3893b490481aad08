//go:build fdpvm

// These tests need a real FDP namespace (scripts/fdp runs them in a QEMU
// guest with an emulated FDP drive). They write to the device: never point
// them at a disk holding data.

package nvme

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/backend"
)

func vmDevice() string {
	if p := os.Getenv("STREAMFS_NVME_DEV"); p != "" {
		return p
	}
	return "/dev/ng0n1"
}

func vmBlockDevice() string {
	if p := os.Getenv("STREAMFS_NVME_BLOCK"); p != "" {
		return p
	}
	return "/dev/nvme0n1"
}

// ruDelta is how many blocks a handle consumed between two RUAMW readings:
// when a reclaim unit fills, the handle moves to a fresh one of ruBlocks.
func ruDelta(before, after, ruBlocks uint64) uint64 {
	if after <= before {
		return before - after
	}
	return before + ruBlocks - after
}

func TestVMPlacement(t *testing.T) {
	d, err := Open(vmDevice(), false)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer d.Close()
	info := d.FDPInfo()
	js, _ := json.Marshal(info)
	t.Logf("fdp info: %s", js)
	if !info.Enabled || d.MaxStreams() < 4 || d.Kind() != "nvme" {
		t.Fatalf("want FDP with at least 4 streams, got %d", d.MaxStreams())
	}

	// Exclusive: a second open of either node is refused.
	if d2, err := Open(vmDevice(), false); err == nil {
		d2.Close()
		t.Fatal("second open of the generic node succeeded")
	} else if !errors.Is(err, backend.ErrBusy) {
		t.Errorf("second open: %v, want ErrBusy", err)
	}
	if d2, err := Open(vmBlockDevice(), false); err == nil {
		d2.Close()
		t.Fatal("open of the block node succeeded while the generic node is held")
	} else if !errors.Is(err, backend.ErrBusy) {
		t.Errorf("block node open: %v, want ErrBusy", err)
	}

	lba := int64(d.SectorSize())
	ruBlocks := info.ReclaimUnitSize / uint64(lba)
	before, err := d.FDPStats()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}

	// Stream s writes s+1 MiB (well under one reclaim unit) in a region of
	// its own, aligned, then one unaligned write in stream 2 that takes the
	// read-modify-write path.
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[uint32]uint64{} // stream -> blocks written
	type extent struct {
		off  int64
		data []byte
	}
	var written []extent
	var hostBytes uint64
	for s := uint32(1); s <= 3; s++ {
		n := int64(s+1) << 20
		off := int64(s) * 64 << 20
		p := backend.AlignedBuf(int(n))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		if err := d.WriteAt(p, off, s); err != nil {
			t.Fatalf("stream %d write: %v", s, err)
		}
		want[s] += uint64(n / lba)
		hostBytes += uint64(n)
		written = append(written, extent{off, p})
	}
	odd := make([]byte, 3*lba+123) // unaligned start, spans 5 blocks
	for i := range odd {
		odd[i] = byte(rng.Uint32())
	}
	oddOff := int64(2)*64<<20 + 5*lba - 77
	if err := d.WriteAt(odd, oddOff, 2); err != nil {
		t.Fatalf("unaligned write: %v", err)
	}
	span := (d.aio.AlignUp(oddOff+int64(len(odd))) - d.aio.AlignDown(oddOff)) / lba
	want[2] += uint64(span)
	hostBytes += uint64(span * lba)
	// The aligned extent of stream 2 now holds the unaligned bytes too.
	copy(written[1].data[oddOff-written[1].off:], odd)

	if err := d.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	after, err := d.FDPStats()
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	js, _ = json.Marshal(after)
	t.Logf("fdp stats after: %s", js)

	// Each stream consumed exactly its own handle's available media writes.
	for i, h := range after.Handles {
		b := before.Handles[i]
		if b.PID != h.PID {
			t.Fatalf("handle order changed: %d vs %d", b.PID, h.PID)
		}
		got := ruDelta(b.RUAMW, h.RUAMW, ruBlocks)
		t.Logf("stream %d pid %d ruhid %d: ruamw %d -> %d, %d blocks (want %d)",
			h.Stream, h.PID, h.RUHID, b.RUAMW, h.RUAMW, got, want[h.Stream])
		if got != want[h.Stream] {
			t.Errorf("pid %d (stream %d): consumed %d blocks, want %d", h.PID, h.Stream, got, want[h.Stream])
		}
	}
	if d := after.HostBytesWritten - before.HostBytesWritten; d != hostBytes {
		t.Errorf("host bytes written grew by %d, want %d", d, hostBytes)
	}

	// Read back, aligned and not.
	for _, e := range written {
		got := backend.AlignedBuf(len(e.data))
		if err := d.ReadAt(got, e.off); err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(got, e.data) {
			t.Errorf("extent at %d: data differs", e.off)
		}
		part := make([]byte, 10000)
		if err := d.ReadAt(part[1:], e.off+333); err != nil {
			t.Fatalf("unaligned read: %v", err)
		}
		if !bytes.Equal(part[1:], e.data[333:333+len(part)-1]) {
			t.Errorf("unaligned read at %d: data differs", e.off+333)
		}
	}

	// Bad input is an error, not a panic.
	if err := d.WriteAt(make([]byte, lba), 0, d.MaxStreams()+1); !errors.Is(err, ErrStream) {
		t.Errorf("stream beyond max: %v", err)
	}
	if err := d.WriteAt(make([]byte, lba), d.Size(), 1); !errors.Is(err, backend.ErrOutOfRange) {
		t.Errorf("write past end: %v", err)
	}
	if err := d.ReadAt(make([]byte, lba), -lba); !errors.Is(err, backend.ErrOutOfRange) {
		t.Errorf("negative read: %v", err)
	}

	// Deallocate the third extent (bigger than one DSM range limit would
	// need only on real drives) and the unaligned edges of the first.
	if err := d.Discard(written[2].off, int64(len(written[2].data))); err != nil {
		t.Errorf("discard: %v", err)
	}
	if err := d.Discard(written[0].off+1, 3*lba); err != nil {
		t.Errorf("unaligned discard: %v", err)
	}
	got := make([]byte, lba)
	if err := d.ReadAt(got, written[0].off); err != nil || !bytes.Equal(got, written[0].data[:lba]) {
		t.Errorf("partial first block was discarded (err %v)", err)
	}
}

// BenchmarkVMWrite compares direct writes through the passthrough backend
// with pwrite on the block node opened O_DIRECT, sequentially at queue depth
// one, over a 256 MiB region.
func BenchmarkVMWrite(b *testing.B) {
	const region = 256 << 20
	for _, size := range []int{4 << 10, 128 << 10} {
		buf := backend.AlignedBuf(size)
		for i := range buf {
			buf[i] = byte(i)
		}
		b.Run(fmt.Sprintf("nvme/%dk", size>>10), func(b *testing.B) {
			d, err := Open(vmDevice(), false)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			b.SetBytes(int64(size))
			off := int64(0)
			for b.Loop() {
				if err := d.WriteAt(buf, off, 2); err != nil {
					b.Fatal(err)
				}
				off = (off + int64(size)) % region
			}
		})
		b.Run(fmt.Sprintf("pwrite/%dk", size>>10), func(b *testing.B) {
			fd, err := unix.Open(vmBlockDevice(), unix.O_RDWR|unix.O_DIRECT|unix.O_EXCL|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(fd)
			b.SetBytes(int64(size))
			off := int64(0)
			for b.Loop() {
				if n, err := unix.Pwrite(fd, buf, off); err != nil || n != size {
					b.Fatalf("pwrite: %d %v", n, err)
				}
				off = (off + int64(size)) % region
			}
		})
	}
}

package nvme

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/streamfs/streamfs/backend"
)

// newAlignedIO builds the bounce-buffer and read-modify-write layer over
// whole-block commands. NVMe reads and writes address whole logical blocks,
// and a buffer handed to the passthrough ioctl must be page-aligned for the
// kernel to map it without copying; anything else goes through a bounce
// buffer of one command's size.
func (d *Device) newAlignedIO() *backend.AlignedIO {
	return backend.NewAlignedIO(backend.AlignedConfig{
		BlockSize: d.lbaSize,
		BufAlign:  pageSize,
		MaxPiece:  d.chunk,
		Read: func(p []byte, off int64) error {
			return d.xfer(ioRead, p, off, 0, false)
		},
		Write: func(p []byte, off int64, stream uint32) error {
			pid, placed, err := d.placement(stream)
			if err != nil {
				return err
			}
			return d.xfer(ioWrite, p, off, pid, placed)
		},
	})
}

// placement maps a write stream to its directive: stream 0 carries none,
// stream N the N-th listed placement identifier. Metadata carries none, as
// Linux sends a filesystem's metadata.
func (d *Device) placement(stream uint32) (pid uint16, placed bool, err error) {
	if stream == 0 || stream == backend.StreamMeta {
		return 0, false, nil
	}
	if stream > uint32(len(d.pids)) {
		return 0, false, fmt.Errorf("stream %d of %d: %w", stream, len(d.pids), ErrStream)
	}
	return d.pids[stream-1], true, nil
}

// maxInflight bounds the commands one large request keeps in flight: a
// drive needs queue depth to reach its bandwidth, and a single ioctl waits
// for its command to complete.
const maxInflight = 4

// xfer reads or writes whole blocks from buf at byte offset off, one command
// per chunk, up to maxInflight chunks at a time.
func (d *Device) xfer(op uint8, buf []byte, off int64, pid uint16, placed bool) error {
	one := func(b []byte, off int64) error {
		c := passthru64{opcode: op, nsid: d.nsid}
		c.cdw10, c.cdw11, c.cdw12, c.cdw13 = rwCDW(uint64(off)>>d.lbaShift, uint32(int64(len(b))>>d.lbaShift), pid, placed)
		if _, err := d.cmd(false, &c, b); err != nil {
			return fmt.Errorf("%s %d bytes at %d: %w", opName(op), len(b), off, err)
		}
		return nil
	}
	if int64(len(buf)) <= d.chunk {
		return one(buf, off)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, maxInflight)
	)
	for pos := int64(0); pos < int64(len(buf)); pos += d.chunk {
		b := buf[pos:min(pos+d.chunk, int64(len(buf)))]
		slots <- struct{}{}
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-slots
			break
		}
		wg.Add(1)
		go func(b []byte, off int64) {
			defer wg.Done()
			defer func() { <-slots }()
			if err := one(b, off); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(b, off+pos)
	}
	wg.Wait()
	return first
}

func opName(op uint8) string {
	if op == ioWrite {
		return "write"
	}
	return "read"
}

// ReadAt implements backend.Device. Unaligned requests read whole blocks
// into a bounce buffer and copy out the wanted bytes.
func (d *Device) ReadAt(p []byte, off int64) error {
	if err := backend.CheckRange("read", off, int64(len(p)), d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if err := d.aio.ReadAt(p, off); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	return nil
}

// WriteAt implements backend.Device: stream N > 0 writes with the N-th
// placement identifier. Unaligned requests go through a bounce buffer,
// reading the partial head and tail blocks first so their other bytes
// survive.
func (d *Device) WriteAt(p []byte, off int64, stream uint32) error {
	if d.readOnly() {
		return fmt.Errorf("device %s: opened read-only: %w", d.path, syscall.EROFS)
	}
	if err := backend.CheckRange("write", off, int64(len(p)), d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	// Checked before anything is written, even for an empty write.
	if _, _, err := d.placement(stream); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	if err := d.aio.WriteAt(p, off, stream); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	return nil
}

// Flush implements backend.Device with an NVMe Flush of the namespace.
func (d *Device) Flush() error {
	if d.readOnly() {
		return nil
	}
	c := passthru64{opcode: ioFlush, nsid: d.nsid}
	if _, err := d.cmd(false, &c, nil); err != nil {
		return fmt.Errorf("device %s: flush: %w", d.path, err)
	}
	return nil
}

// Discard implements backend.Device with Dataset Management (deallocate) of
// the whole blocks inside the range; partial blocks at the edges are left
// alone because their other bytes may be live.
func (d *Device) Discard(off, length int64) error {
	if d.readOnly() {
		return fmt.Errorf("device %s: opened read-only: %w", d.path, syscall.EROFS)
	}
	if err := backend.CheckRange("discard", off, length, d.size); err != nil {
		return fmt.Errorf("device %s: %w", d.path, err)
	}
	start, end := d.aio.AlignUp(off), d.aio.AlignDown(off+length)
	if end <= start {
		return nil
	}
	ranges := dsmMaxRanges
	if d.dsmRanges > 0 {
		ranges = min(ranges, d.dsmRanges)
	}
	buf := backend.AlignedBuf(ranges * dsmRangeSize)
	slba, nlb := uint64(start)>>d.lbaShift, uint64(end-start)>>d.lbaShift
	for nlb > 0 {
		nr, covered := encodeDSMRanges(buf, slba, nlb, d.dsmRange)
		c := passthru64{opcode: ioDSM, nsid: d.nsid, cdw10: uint32(nr - 1), cdw11: dsmDeallocate}
		if _, err := d.cmd(false, &c, buf[:nr*dsmRangeSize]); err != nil {
			return fmt.Errorf("device %s: deallocate %d blocks at LBA %d: %w", d.path, covered, slba, err)
		}
		slba += covered
		nlb -= covered
	}
	return nil
}

// Size implements backend.Device.
func (d *Device) Size() int64 { return d.size }

// SectorSize implements backend.Device: the namespace's LBA size.
func (d *Device) SectorSize() int { return int(d.lbaSize) }

// MaxStreams implements backend.Device: one stream per placement identifier.
func (d *Device) MaxStreams() uint32 { return uint32(len(d.pids)) }

// Kind implements backend.Device.
func (d *Device) Kind() string { return "nvme" }

// readOnly reports a namespace opened (and still) read-only.
func (d *Device) readOnly() bool { return d.c != nil && d.c.ReadOnly() }

// MakeWritable implements backend.Reopener: the node opened read-only is
// opened again read-write, keeping its flock and O_EXCL claim (and the
// block node's, for the generic node). A namespace the kernel marks
// read-only (write-protected) is refused.
func (d *Device) MakeWritable() error {
	if d.c == nil {
		return nil
	}
	if d.claim != nil {
		// The generic node has no read-only flag; its block node has.
		if ro, err := backend.BlockReadOnly(d.claim); err == nil && ro {
			return fmt.Errorf("device %s: read-only namespace (blockdev --getro): %w", d.path, backend.ErrWriteProtected)
		}
	}
	return d.c.MakeWritable()
}

// Close releases the namespace, its lock and its block-node claim.
func (d *Device) Close() error {
	var err error
	if d.c != nil {
		err = d.c.Close()
	}
	if d.claim != nil {
		if cerr := d.claim.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close device %s: %w", d.path, cerr)
		}
	}
	return err
}

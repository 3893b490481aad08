package nvme

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/streamfs/streamfs/backend"
)

// memNS is an in-memory NVM namespace that decodes the commands the device
// sends the way a controller does, so the tests check the wire encoding
// (CDWs, lengths, directives) together with the I/O logic above it.
type memNS struct {
	t        *testing.T
	nsid     uint32
	shift    uint
	maxBytes int // largest data transfer accepted (MDTS)
	mu       sync.Mutex
	data     []byte
	writes   []placedWrite
	dealloc  [][2]uint64 // {slba, nlb}
	ctrl     *ctrlModel  // answers admin commands and RUH status when set
}

type placedWrite struct {
	slba   uint64
	nlb    uint32
	placed bool
	pid    uint16
}

func (m *memNS) submit(admin bool, c *passthru64, buf []byte) (uint64, error) {
	if admin {
		if m.ctrl == nil {
			return 0, fmt.Errorf("unexpected admin opcode %#x", c.opcode)
		}
		return m.ctrl.admin(c, buf)
	}
	if c.opcode == ioMgmtRecv && m.ctrl != nil {
		return m.ctrl.mgmtRecv(c, buf)
	}
	if c.nsid != m.nsid {
		return 0, fmt.Errorf("nsid %d, want %d", c.nsid, m.nsid)
	}
	if len(buf) > m.maxBytes {
		return 0, fmt.Errorf("transfer of %d bytes beyond MDTS %d", len(buf), m.maxBytes)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch c.opcode {
	case ioRead, ioWrite:
		slba := uint64(c.cdw11)<<32 | uint64(c.cdw10)
		nlb := c.cdw12&0xffff + 1
		if len(buf) != int(nlb)<<m.shift {
			return 0, fmt.Errorf("data length %d for %d blocks", len(buf), nlb)
		}
		if c.cdw12&^(0xffff|0xf<<20) != 0 || c.cdw13&0xffff != 0 {
			return 0, fmt.Errorf("stray bits: cdw12 %#x cdw13 %#x", c.cdw12, c.cdw13)
		}
		off := int(slba) << m.shift
		if off+len(buf) > len(m.data) {
			return 0, &StatusError{Opcode: c.opcode, Status: 0x80} // LBA out of range
		}
		if c.opcode == ioRead {
			if c.cdw12>>20&0xf != 0 {
				return 0, errors.New("directive on a read")
			}
			copy(buf, m.data[off:])
			return 0, nil
		}
		dtype := c.cdw12 >> 20 & 0xf
		if dtype != 0 && dtype != dtypePlacement {
			return 0, fmt.Errorf("dtype %d", dtype)
		}
		copy(m.data[off:], buf)
		m.writes = append(m.writes, placedWrite{slba, nlb, dtype == dtypePlacement, uint16(c.cdw13 >> 16)})
		return 0, nil
	case ioDSM:
		if c.cdw11 != dsmDeallocate {
			return 0, fmt.Errorf("dsm attributes %#x", c.cdw11)
		}
		nr := int(c.cdw10&0xff) + 1
		if len(buf) != nr*dsmRangeSize {
			return 0, fmt.Errorf("dsm: %d bytes for %d ranges", len(buf), nr)
		}
		for i := range nr {
			r := buf[i*dsmRangeSize:]
			m.dealloc = append(m.dealloc, [2]uint64{binary.LittleEndian.Uint64(r[8:]), uint64(binary.LittleEndian.Uint32(r[4:]))})
		}
		return 0, nil
	case ioFlush:
		return 0, nil
	}
	return 0, fmt.Errorf("unexpected io opcode %#x", c.opcode)
}

// testDevice builds a Device over a memNS of nblocks blocks of 1<<shift
// bytes, with the given transfer chunk and placement identifiers.
func testDevice(t *testing.T, shift uint, nblocks int, chunk int64, pids []uint16) (*Device, *memNS) {
	m := &memNS{t: t, nsid: 3, shift: shift, maxBytes: int(chunk), data: make([]byte, nblocks<<shift)}
	d := &Device{
		path: "test", nsid: 3, lbaShift: shift, lbaSize: 1 << shift,
		size: int64(nblocks) << shift, chunk: chunk, pids: pids, submitFn: m.submit,
	}
	d.aio = d.newAlignedIO()
	return d, m
}

func randBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], r.Uint64())
	rand.NewChaCha8(seed).Read(p)
	return p
}

func TestWritePlacementDirective(t *testing.T) {
	d, m := testDevice(t, 12, 1024, 64<<10, []uint16{0x10, 0x11, 0x12})
	if d.MaxStreams() != 3 {
		t.Fatalf("MaxStreams = %d", d.MaxStreams())
	}
	p := backend.AlignedBuf(200 << 10) // 50 blocks: chunks of 16, 16, 16, 2
	if err := d.WriteAt(p, 8<<12, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(p[:4096], 0, 0); err != nil {
		t.Fatal(err)
	}
	// Chunks of one request go out concurrently: compare in LBA order.
	want := []placedWrite{
		{0, 1, false, 0},
		{8, 16, true, 0x12}, {24, 16, true, 0x12}, {40, 16, true, 0x12}, {56, 2, true, 0x12},
	}
	slices.SortFunc(m.writes, func(a, b placedWrite) int { return cmp.Compare(a.slba, b.slba) })
	if len(m.writes) != len(want) {
		t.Fatalf("writes %+v, want %+v", m.writes, want)
	}
	for i := range want {
		if m.writes[i] != want[i] {
			t.Errorf("write %d: %+v, want %+v", i, m.writes[i], want[i])
		}
	}
	if err := d.WriteAt(p[:4096], 0, 4); !errors.Is(err, ErrStream) {
		t.Errorf("stream 4 of 3: %v", err)
	}
}

func TestUnalignedReadWrite(t *testing.T) {
	for _, shift := range []uint{9, 12} {
		t.Run(fmt.Sprint(1<<shift), func(t *testing.T) {
			d, m := testDevice(t, shift, 2048, 32<<10, []uint16{0, 1})
			r := rand.New(rand.NewPCG(uint64(shift), 9))
			ref := randBytes(r, int(d.Size()))
			copy(m.data, ref)
			for i := range 300 {
				n := 1 + r.IntN(100<<10)
				off := r.Int64N(d.Size() - int64(n))
				if i%3 == 0 { // whole blocks, sometimes at an odd address
					off = d.aio.AlignDown(off)
					n = max(int(d.aio.AlignDown(int64(n))), int(d.lbaSize))
				}
				p := randBytes(r, n+1)[1:] // rarely page aligned
				if err := d.WriteAt(p, off, uint32(i%3)); err != nil {
					t.Fatal(err)
				}
				copy(ref[off:], p)
				q := make([]byte, n+3)[3:]
				roff := max(0, off-int64(r.IntN(5000)))
				rn := min(int64(len(q)), d.Size()-roff)
				if err := d.ReadAt(q[:rn], roff); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(q[:rn], ref[roff:roff+rn]) {
					t.Fatalf("step %d: read %d at %d differs", i, rn, roff)
				}
			}
			if !bytes.Equal(m.data, ref) {
				t.Fatal("device content differs from reference")
			}
		})
	}
}

// Concurrent writers of neighbouring bytes in the same blocks must not lose
// each other's bytes to read-modify-write.
func TestConcurrentPartialWrites(t *testing.T) {
	d, m := testDevice(t, 12, 64, 16<<10, []uint16{0})
	const writers = 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Writer w owns bytes i with i%writers == w in the first 3 blocks.
			for i := w; i < 3*4096; i += writers {
				if err := d.WriteAt([]byte{byte(w + 1)}, int64(i), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range 3 * 4096 {
		if m.data[i] != byte(i%writers+1) {
			t.Fatalf("byte %d = %d, want %d", i, m.data[i], i%writers+1)
		}
	}
}

func TestDiscardRanges(t *testing.T) {
	d, m := testDevice(t, 12, 16, 128<<10, []uint16{0})
	d.size = 1 << 32 // deallocation touches no data: no need to back it
	d.dsmRange = 1000
	// From the middle of block 1 to the middle of block 300_002: the
	// partial edge blocks stay.
	if err := d.Discard(4096+100, 300_001*4096); err != nil {
		t.Fatal(err)
	}
	var next, total uint64 = 2, 0
	for i, r := range m.dealloc {
		if r[0] != next || r[1] == 0 || r[1] > 1000 {
			t.Fatalf("range %d: %v (next %d)", i, r, next)
		}
		next += r[1]
		total += r[1]
	}
	if total != 300_000 {
		t.Errorf("deallocated %d blocks, want 300000", total)
	}
	m.dealloc = nil
	if err := d.Discard(100, 4000); err != nil || len(m.dealloc) != 0 {
		t.Errorf("sub-block discard: %v, %v", err, m.dealloc)
	}
}

func TestBadInput(t *testing.T) {
	d, _ := testDevice(t, 12, 16, 16<<10, []uint16{0})
	for name, err := range map[string]error{
		"negative read":   d.ReadAt(make([]byte, 10), -1),
		"read past end":   d.ReadAt(make([]byte, 4097), 15*4096),
		"write past end":  d.WriteAt(make([]byte, 1), d.Size(), 0),
		"negative write":  d.WriteAt(make([]byte, 1), -4096, 0),
		"discard too far": d.Discard(0, d.Size()+1),
	} {
		if !errors.Is(err, backend.ErrOutOfRange) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Read-only: a descriptor opened so (a file stands in for the node;
	// commands go to the in-memory controller), then made writable.
	node := filepath.Join(t.TempDir(), "node")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	d.c = backend.NewClaimed(f, node, true, 0)
	if err := d.WriteAt(make([]byte, 4096), 0, 0); err == nil {
		t.Error("write on a read-only device")
	}
	if err := d.Discard(0, 4096); err == nil {
		t.Error("discard on a read-only device")
	}
	if err := d.MakeWritable(); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(make([]byte, 4096), 0, 0); err != nil {
		t.Errorf("write after MakeWritable: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d.c = nil
	// A failing command surfaces with its NVMe status.
	d.size = 32 << 12 // larger than the namespace behind it
	var se *StatusError
	if err := d.WriteAt(make([]byte, 4096), 20<<12, 1); !errors.As(err, &se) || se.Status != 0x80 {
		t.Errorf("out of range LBA: %v", err)
	}
	// Of a request split in concurrent chunks, the failing one is reported.
	if err := d.WriteAt(backend.AlignedBuf(40<<10), 12<<12, 1); !errors.As(err, &se) || se.Status != 0x80 {
		t.Errorf("chunked write past the namespace: %v", err)
	}
}

package faulty

import (
	"bytes"
	"fmt"
	"sync"
	"syscall"

	"github.com/streamfs/streamfs/backend"
)

// memChunk is the unit Mem stores. Chunks that were never written (or were
// discarded, or hold only zeros) take no memory, so a mostly empty image of
// a few hundred MiB stays cheap to copy and clone.
const memChunk = 64 << 10

// Mem is an in-memory backend.Device, sparse in memChunk units. It is what
// CutImage returns: a crash image a test can mount, check and throw away
// without temporary files or device locks. Flush does nothing (memory is the
// media) and Discard zeroes. It is safe for concurrent use.
type Mem struct {
	size    int64
	sector  int
	streams uint32

	mu     sync.RWMutex     // guards chunks and closed; never held while calling another device
	chunks map[int64][]byte // chunk index → memChunk bytes; absent reads as zeros
	closed bool
}

var _ backend.Device = (*Mem)(nil)

// NewMem returns a zero-filled in-memory device of size bytes with the given
// sector size (a power of two from 512 to 4096) and no hardware streams.
func NewMem(size int64, sectorSize int) (*Mem, error) {
	if size < 0 {
		return nil, fmt.Errorf("faulty: memory device of %d bytes: %w", size, syscall.EINVAL)
	}
	if sectorSize < 512 || sectorSize > 4096 || sectorSize&(sectorSize-1) != 0 {
		return nil, fmt.Errorf("faulty: memory device sector size %d: %w", sectorSize, syscall.EINVAL)
	}
	return &Mem{size: size, sector: sectorSize, chunks: map[int64][]byte{}}, nil
}

// CopyToMem reads all of src into a new Mem with src's size, sector size and
// stream count.
func CopyToMem(src backend.Device) (*Mem, error) {
	m, err := NewMem(src.Size(), src.SectorSize())
	if err != nil {
		return nil, err
	}
	m.streams = src.MaxStreams()
	if err := m.fillFrom(src); err != nil {
		return nil, err
	}
	return m, nil
}

// fillFrom copies src's contents into m, which has the same size.
func (m *Mem) fillFrom(src backend.Device) error {
	const step = 16 * memChunk // a multiple of every sector size
	buf := backend.AlignedBuf(step)
	for off := int64(0); off < m.size; off += step {
		p := buf[:min(step, m.size-off)]
		if err := src.ReadAt(p, off); err != nil {
			return fmt.Errorf("faulty: copy device to memory at %d: %w", off, err)
		}
		if err := m.WriteAt(p, off, 0); err != nil {
			return err
		}
	}
	return nil
}

// Clone returns an independent, open copy of m. It works on a closed Mem
// too, so a test can mount one crash image several times.
func (m *Mem) Clone() *Mem {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c := &Mem{size: m.size, sector: m.sector, streams: m.streams, chunks: make(map[int64][]byte, len(m.chunks))}
	for k, v := range m.chunks {
		c.chunks[k] = bytes.Clone(v)
	}
	return c
}

func (m *Mem) checkLocked(what string, off, n int64) error {
	if m.closed {
		return fmt.Errorf("memory device %s: closed: %w", what, syscall.EBADF)
	}
	if err := backend.CheckRange(what, off, n, m.size); err != nil {
		return fmt.Errorf("memory device: %w", err)
	}
	return nil
}

// ReadAt implements backend.Device.
func (m *Mem) ReadAt(p []byte, off int64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.checkLocked("read", off, int64(len(p))); err != nil {
		return err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		ci, co := pos/memChunk, int(pos%memChunk)
		n := min(len(p)-done, memChunk-co)
		if c, ok := m.chunks[ci]; ok {
			copy(p[done:done+n], c[co:])
		} else {
			clear(p[done : done+n])
		}
		done += n
	}
	return nil
}

// WriteAt implements backend.Device; the stream is ignored.
func (m *Mem) WriteAt(p []byte, off int64, _ uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked("write", off, int64(len(p))); err != nil {
		return err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		ci, co := pos/memChunk, int(pos%memChunk)
		n := min(len(p)-done, memChunk-co)
		src := p[done : done+n]
		c, ok := m.chunks[ci]
		switch {
		case ok:
			copy(c[co:], src)
		case !isZero(src):
			c = make([]byte, memChunk)
			copy(c[co:], src)
			m.chunks[ci] = c
		}
		done += n
	}
	return nil
}

// Flush implements backend.Device: memory is the media, nothing to do.
func (m *Mem) Flush() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return fmt.Errorf("memory device flush: closed: %w", syscall.EBADF)
	}
	return nil
}

// Discard implements backend.Device by zeroing the range.
func (m *Mem) Discard(off, length int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked("discard", off, length); err != nil {
		return err
	}
	for pos, end := off, off+length; pos < end; {
		ci, co := pos/memChunk, pos%memChunk
		n := min(end-pos, memChunk-co)
		if c, ok := m.chunks[ci]; ok {
			if n == memChunk {
				delete(m.chunks, ci)
			} else {
				clear(c[co : co+n])
			}
		}
		pos += n
	}
	return nil
}

// Size implements backend.Device.
func (m *Mem) Size() int64 { return m.size }

// SectorSize implements backend.Device.
func (m *Mem) SectorSize() int { return m.sector }

// MaxStreams implements backend.Device.
func (m *Mem) MaxStreams() uint32 { return m.streams }

// Kind implements backend.Device.
func (m *Mem) Kind() string { return "mem" }

// MakeWritable implements backend.Reopener: memory has no read-only mode.
func (m *Mem) MakeWritable() error { return nil }

// Close implements backend.Device: later I/O fails, the contents stay for
// Clone.
func (m *Mem) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// MemBytes is the memory the device's contents take, for tests that check
// an image stays sparse.
func (m *Mem) MemBytes() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int64(len(m.chunks)) * memChunk
}

func isZero(p []byte) bool {
	for len(p) >= 8 {
		if p[0]|p[1]|p[2]|p[3]|p[4]|p[5]|p[6]|p[7] != 0 {
			return false
		}
		p = p[8:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

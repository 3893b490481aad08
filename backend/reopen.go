package backend

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrWriteProtected means a device opened read-only cannot be made
// read-write: a block device the kernel marks read-only (BLKROGET), or an
// image file that cannot be opened for writing. It matches syscall.EROFS
// under errors.Is.
var ErrWriteProtected error = fmt.Errorf("device is write-protected: %w", syscall.EROFS)

// ErrCannotReopen means a device has no way to turn read-write in place.
var ErrCannotReopen = errors.New("device cannot be reopened read-write in place")

// Reopener is a device opened read-only that can turn read-write without
// closing: a remount read-write of a read-only mount. The exclusive claim
// (flock, O_EXCL) is held throughout and reads keep working meanwhile.
type Reopener interface {
	// MakeWritable reopens the device for writing; nil when it already
	// is writable. On an error the device is as it was.
	MakeWritable() error
}

// MakeWritable turns dev read-write in place (Reopener), or explains why it
// cannot: ErrWriteProtected, ErrCannotReopen.
func MakeWritable(dev Device) error {
	r, ok := dev.(Reopener)
	if !ok {
		return fmt.Errorf("%s device: %w", dev.Kind(), ErrCannotReopen)
	}
	return r.MakeWritable()
}

// Claimed is the descriptor of a device held exclusively, which a remount
// read-write replaces in place. The first descriptor stays open until
// Close, whatever replaces it: its flock (and a block device's O_EXCL
// claim) is what keeps other mounters out, and a second open of the
// device could not take either while it holds them. Reads may run
// concurrently with MakeWritable: they use whichever descriptor they
// loaded, and both stay open.
type Claimed struct {
	path  string
	extra int // flags of a read-write reopen beside O_RDWR (O_DIRECT)

	mu    sync.Mutex // serialises MakeWritable; guards first
	first *os.File   // opened by the caller: holds the claim until Close
	cur   atomic.Pointer[os.File]
	ro    atomic.Bool
}

// NewClaimed wraps f, the device at path just opened and claimed; ro says
// it was opened read-only, extra the open flags (beside the access mode and
// O_EXCL) that a reopen read-write must use as well.
func NewClaimed(f *os.File, path string, ro bool, extra int) *Claimed {
	c := &Claimed{path: path, extra: extra, first: f}
	c.cur.Store(f)
	c.ro.Store(ro)
	return c
}

// File is the descriptor to do I/O through.
func (c *Claimed) File() *os.File { return c.cur.Load() }

// ReadOnly reports a descriptor without write access.
func (c *Claimed) ReadOnly() bool { return c.ro.Load() }

// MakeWritable opens the same device again read-write, through the
// descriptor already held (/proc/self/fd), so that a path renamed or
// replaced meanwhile cannot hand over another file. No O_EXCL: the first
// descriptor keeps the claim. A block device the kernel marks read-only
// opens read-write all the same and only its writes fail, so it is asked
// first (BLKROGET).
func (c *Claimed) MakeWritable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ro.Load() {
		return nil
	}
	st, err := c.first.Stat()
	if err != nil {
		return fmt.Errorf("device %s: stat: %w", c.path, err)
	}
	if st.Mode().Type() == fs.ModeDevice {
		if ro, err := BlockReadOnly(c.first); err != nil {
			return fmt.Errorf("device %s: %w", c.path, err)
		} else if ro {
			return fmt.Errorf("device %s: read-only block device (blockdev --getro): %w", c.path, ErrWriteProtected)
		}
	}
	var f *os.File
	err = WithFd(c.first, func(fd int) error {
		nfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC|c.extra, 0)
		if err != nil {
			return err
		}
		f = os.NewFile(uintptr(nfd), c.path)
		return nil
	})
	if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("device %s: open read-write: %w: %w", c.path, ErrWriteProtected, err)
	}
	if err != nil {
		return fmt.Errorf("device %s: open read-write: %w", c.path, err)
	}
	// The magic link resolves to the descriptor's own inode; checked all
	// the same, since writing another file would be beyond repair.
	nst, err := f.Stat()
	if err != nil || !os.SameFile(st, nst) {
		f.Close()
		return fmt.Errorf("device %s: reopened read-write, but not the same file (%v)", c.path, err)
	}
	// The descriptor before the flag: a writer that sees ro false loads
	// the read-write descriptor.
	c.cur.Store(f)
	c.ro.Store(false)
	return nil
}

// Close closes both descriptors, releasing the claim last.
func (c *Claimed) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if f := c.cur.Load(); f != c.first {
		err = f.Close()
	}
	if cerr := c.first.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close device %s: %w", c.path, err)
	}
	return nil
}

// BlockReadOnly asks the kernel whether the block device f is read-only.
func BlockReadOnly(f *os.File) (bool, error) {
	var ro int
	err := WithFd(f, func(fd int) error {
		var err error
		ro, err = unix.IoctlGetInt(fd, unix.BLKROGET)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("BLKROGET: %w", err)
	}
	return ro != 0, nil
}

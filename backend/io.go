package backend

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrOutOfRange means an I/O request reaches outside the device.
var ErrOutOfRange = errors.New("I/O range outside the device")

// CheckRange rejects negative and past-the-end requests before they reach
// the kernel, where a file would silently grow and a block device would
// return a short transfer. what names the operation in the error.
func CheckRange(what string, off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("%s %d bytes at %d (device size %d): %w", what, n, off, size, ErrOutOfRange)
	}
	return nil
}

// preadFull reads exactly len(p) bytes; os.File.ReadAt already loops over
// short reads and EINTR, so only EOF needs translating.
func preadFull(f *os.File, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if err == io.EOF || (err == nil && n < len(p)) {
		return fmt.Errorf("read %d bytes at %d: got %d: %w", len(p), off, n, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return fmt.Errorf("read %d bytes at %d: %w", len(p), off, err)
	}
	return nil
}

// pwriteFull writes all of p; os.File.WriteAt loops until done or an error.
func pwriteFull(f *os.File, p []byte, off int64) error {
	n, err := f.WriteAt(p, off)
	if err != nil {
		return fmt.Errorf("write %d bytes at %d: %w", len(p), off, err)
	}
	if n < len(p) {
		return fmt.Errorf("write %d bytes at %d: wrote %d: %w", len(p), off, n, io.ErrShortWrite)
	}
	return nil
}

// WithFd runs fn on the file's descriptor while os.File guarantees it stays
// open, so a concurrent Close cannot hand the number to another file.
func WithFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) { opErr = fn(int(fd)) }); err != nil {
		return err
	}
	return opErr
}

// LockExclusive takes the whole-device flock that marks a mount as owner;
// another holder gives ErrBusy.
func LockExclusive(f *os.File, path string) error {
	err := WithFd(f, func(fd int) error {
		for {
			err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
			if err != unix.EINTR {
				return err
			}
		}
	})
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("device %s: locked: %w", path, ErrBusy)
	}
	if err != nil {
		return fmt.Errorf("device %s: flock: %w", path, err)
	}
	return nil
}

func fdatasync(f *os.File) error {
	return WithFd(f, func(fd int) error {
		for {
			err := unix.Fdatasync(fd)
			if err != unix.EINTR {
				return err
			}
		}
	})
}

func errReadOnly(path string) error {
	return fmt.Errorf("device %s opened read-only: %w", path, syscall.EROFS)
}

// isNotSupported reports errors meaning "this device cannot discard".
func isNotSupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) ||
		errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTTY)
}

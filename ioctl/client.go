package ioctl

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OpName returns the name the seed's example program uses for an operation
// in its messages ("GET_MAX", "GET", "SET"), or a hex form for anything
// else, so tools print the same prefixes as the C program.
func OpName(op uint32) string {
	switch op {
	case OpGetMax:
		return "GET_MAX"
	case OpGet:
		return "GET"
	case OpSet:
		return "SET"
	default:
		return fmt.Sprintf("0x%x", op)
	}
}

// Do issues FS_IOC_WRITE_STREAM on fd with ws as the argument; the kernel
// (or the FUSE daemon) updates ws in place. A failure is returned as
// "ioctl(OP): <errno>" wrapping the raw unix.Errno, so callers can use
// errors.Is/As and print the C library's wording.
func Do(fd uintptr, ws *WriteStream) error {
	b := ws.Bytes()
	if err := ioctlPtr(fd, FS_IOC_WRITE_STREAM, b); err != nil {
		return fmt.Errorf("ioctl(%s): %w", OpName(ws.OpFlags), err)
	}
	got, err := DecodeWriteStream(b)
	if err != nil {
		return err
	}
	*ws = got
	return nil
}

// ioctlPtr issues cmd with a pointer to b, retrying on EINTR: a FUSE
// request can be interrupted by a signal (the Go runtime sends them for
// preemption), and every call this package makes is idempotent.
func ioctlPtr(fd uintptr, cmd uint32, b []byte) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(cmd), uintptr(unsafe.Pointer(&b[0])))
		if errors.Is(errno, unix.EINTR) {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// GetMax returns the number of streams N the file's filesystem offers;
// valid ids are 0..N.
func GetMax(fd uintptr) (uint32, error) {
	ws := WriteStream{OpFlags: OpGetMax}
	if err := Do(fd, &ws); err != nil {
		return 0, err
	}
	return ws.MaxStreams(), nil
}

// Get returns the file's current stream id (0: none).
func Get(fd uintptr) (uint32, error) {
	ws := WriteStream{OpFlags: OpGet}
	if err := Do(fd, &ws); err != nil {
		return 0, err
	}
	return ws.StreamID, nil
}

// Set assigns stream id to the file. The descriptor must be open for writing
// (or be a directory the caller owns); the filesystem rejects ids above
// GetMax with EINVAL.
func Set(fd uintptr, id uint32) error {
	ws := WriteStream{OpFlags: OpSet, StreamID: id}
	return Do(fd, &ws)
}

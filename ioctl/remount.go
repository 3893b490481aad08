package ioctl

import "fmt"

// STREAMFS_IOC_REMOUNT = _IOWR('S', 2, __u32) tells the daemon of a remount
// (the kernel does not): the argument is RemountReadOnly or 0 (read-write).
var STREAMFS_IOC_REMOUNT = IOWR('S', 2, 4)

// RemountReadOnly is the flag of STREAMFS_IOC_REMOUNT for a read-only remount.
const RemountReadOnly uint32 = 1

// Remount asks the daemon serving fd's filesystem to turn read-only (ro) or
// read-write.
func Remount(fd uintptr, ro bool) error {
	b := make([]byte, 4)
	if ro {
		byteOrder.PutUint32(b, RemountReadOnly)
	}
	if err := ioctlPtr(fd, STREAMFS_IOC_REMOUNT, b); err != nil {
		return fmt.Errorf("streamfs remount: %w", err)
	}
	return nil
}

// DecodeU32 reads a 4-byte ioctl argument.
func DecodeU32(b []byte) (uint32, error) {
	if len(b) < 4 {
		return 0, fmt.Errorf("decode __u32 from %d bytes: %w", len(b), ErrShortBuffer)
	}
	return byteOrder.Uint32(b), nil
}

// EncodeU32 writes a 4-byte ioctl argument.
func EncodeU32(b []byte, v uint32) error {
	if len(b) < 4 {
		return fmt.Errorf("encode __u32 into %d bytes: %w", len(b), ErrShortBuffer)
	}
	byteOrder.PutUint32(b, v)
	return nil
}

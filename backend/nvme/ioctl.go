package nvme

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// passthru64 mirrors struct nvme_passthru_cmd64 of <linux/nvme_ioctl.h>
// (80 bytes; data_len shares its slot with vec_cnt).
type passthru64 struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2        uint32
	cdw3        uint32
	metadata    uint64
	addr        uint64
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMs   uint32
	rsvd2       uint32
	result      uint64
}

const passthru64Size = 80

// ioc builds an ioctl request number the way <asm-generic/ioctl.h> does.
func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | typ<<8 | nr
}

const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2
)

var (
	ioctlID      = ioc(iocNone, 'N', 0x40, 0)
	ioctlAdmin64 = ioc(iocRead|iocWrite, 'N', 0x47, passthru64Size)
	ioctlIO64    = ioc(iocRead|iocWrite, 'N', 0x48, passthru64Size)
)

// StatusError is a command the controller completed with a nonzero status
// (status code type and status code, as the ioctl returns them).
type StatusError struct {
	Opcode uint8
	Admin  bool
	Status uint32
}

func (e *StatusError) Error() string {
	q := "io"
	if e.Admin {
		q = "admin"
	}
	return fmt.Sprintf("nvme %s command 0x%02x failed: status 0x%x (sct %d, sc 0x%02x)",
		q, e.Opcode, e.Status, e.Status>>8&0x7, e.Status&0xff)
}

// submit runs one passthrough command with buf as its data buffer and returns
// completion dword 0.
//
// The command carries the buffer address as a plain integer, invisible to the
// garbage collector, so buf is kept alive until the ioctl returns. The
// address is taken with no call in between that could grow (and so move) the
// goroutine stack: Syscall is nosplit, and a goroutine's stack is never
// moved while it sits in a system call.
func submit(fd int, admin bool, c *passthru64, buf []byte) (uint64, error) {
	req := ioctlIO64
	if admin {
		req = ioctlAdmin64
	}
	c.dataLen = uint32(len(buf))
	c.addr = 0
	if len(buf) > 0 {
		c.addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(c)))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return 0, fmt.Errorf("nvme ioctl opcode 0x%02x: %w", c.opcode, errno)
	}
	if r != 0 {
		return 0, &StatusError{Opcode: c.opcode, Admin: admin, Status: uint32(r)}
	}
	return c.result, nil
}

// namespaceID asks the kernel which namespace the node fd belongs to.
func namespaceID(fd int) (uint32, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlID, 0)
	if errno != 0 {
		return 0, fmt.Errorf("NVME_IOCTL_ID: %w", errno)
	}
	return uint32(r), nil
}

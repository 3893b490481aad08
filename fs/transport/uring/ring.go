// Package uring is a FUSE-over-io_uring transport (Linux 6.14+,
// CONFIG_FUSE_IO_URING, /sys/module/fuse/parameters/enable_uring=Y): one
// io_uring per possible CPU, each served by an OS thread pinned to that CPU,
// exchanging requests and replies with the kernel through registered
// buffers instead of read(2)/writev(2) on /dev/fuse. Requests are decoded
// and answered by go-fuse's ProtocolServer (any Handler); INIT, FORGET,
// INTERRUPT and notifications stay on /dev/fuse.
//
// The ABI mirrors include/uapi/linux/io_uring.h and include/uapi/linux/fuse.h;
// the protocol is fs/fuse/dev_uring.c's.
package uring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring_setup flags and opcodes used here.
const (
	setupSQE128 = 1 << 10 // fuse_uring_cmd_req needs the 80-byte command area

	opURingCmd = 46

	enterGetEvents = 1 << 0

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

// sqe is a 128-byte submission entry (IORING_SETUP_SQE128); for
// IORING_OP_URING_CMD the command area starts at byte 48 and is 80 bytes.
type sqe struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64 // cmd_op in the low 32 bits for URING_CMD
	addr     uint64
	len      uint32
	opFlags  uint32
	userData uint64
	bufIndex uint16
	personal uint16
	spliceFd int32
	cmd      [80]byte
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// Any drift from the kernel's layout fails to compile.
var (
	_ [128]byte = [unsafe.Sizeof(sqe{})]byte{}
	_ [16]byte  = [unsafe.Sizeof(cqe{})]byte{}
	_ [120]byte = [unsafe.Sizeof(params{})]byte{}
)

// ring is one io_uring: its fd and the mapped SQ, CQ and SQE arrays. Only
// its queue's thread submits and reaps, so it needs no lock.
type ring struct {
	fd             int
	sqMap, cqMap   []byte
	sqeMap         []byte
	sqes           []sqe
	sqHead, sqTail *uint32
	sqMask         uint32
	sqEntries      uint32
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []cqe
	pending        uint32 // SQEs written but not yet submitted
}

// newRing sets up a ring of at least entries SQEs. Completions (the
// kernel's copy of a request into our buffers) run as task work in the
// thread that armed the entry; that thread sleeps in io_uring_enter and is
// woken for them.
func newRing(entries uint32) (*ring, error) {
	p := params{flags: setupSQE128}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ring{fd: int(fd)}
	var err error
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(cqe{}))
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	if r.sqMap, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, flags); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap of the submission ring: %w", err)
	}
	if r.cqMap, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap of the completion ring: %w", err)
	}
	if r.sqeMap, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), prot, flags); err != nil {
		r.close()
		return nil, fmt.Errorf("mmap of the submission entries: %w", err)
	}
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMap[0])), p.sqEntries)
	r.sqHead = (*uint32)(unsafe.Pointer(&r.sqMap[p.sqOff.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sqMap[p.sqOff.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&r.sqMap[p.sqOff.ringMask]))
	r.sqEntries = p.sqEntries
	array := unsafe.Slice((*uint32)(unsafe.Pointer(&r.sqMap[p.sqOff.array])), p.sqEntries)
	for i := range array {
		array[i] = uint32(i) // slot i always names SQE i
	}
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cqMap[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cqMap[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&r.cqMap[p.cqOff.ringMask]))
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&r.cqMap[p.cqOff.cqes])), p.cqEntries)
	return r, nil
}

// next returns a zeroed SQE to fill, or nil when the submission ring is full.
func (r *ring) next() *sqe {
	tail := atomic.LoadUint32(r.sqTail)
	if tail-atomic.LoadUint32(r.sqHead) >= r.sqEntries {
		return nil
	}
	s := &r.sqes[tail&r.sqMask]
	*s = sqe{}
	atomic.StoreUint32(r.sqTail, tail+1)
	r.pending++
	return s
}

// enter submits the pending SQEs and, with wait, sleeps until at least one
// completion is there.
func (r *ring) enter(wait bool) error {
	var min, flags uintptr
	if wait {
		min, flags = 1, enterGetEvents
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.pending), min, flags, 0, 0)
		if errno == unix.EINTR {
			// Only a wait is interrupted before anything is submitted:
			// a submission that went through returns its count. n is -1
			// here, and taking it off pending would leave pending above
			// what the ring holds; the kernel then submits fewer than
			// asked and returns without waiting, and the thread spins.
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		r.pending -= uint32(n)
		return nil
	}
}

// peek returns the oldest unread completion, or nil.
func (r *ring) peek() *cqe {
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return nil
	}
	return &r.cqes[head&r.cqMask]
}

// advance consumes the completion peek returned.
func (r *ring) advance() { atomic.StoreUint32(r.cqHead, atomic.LoadUint32(r.cqHead)+1) }

func (r *ring) close() {
	for _, m := range [][]byte{r.sqeMap, r.cqMap, r.sqMap} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMap, r.cqMap, r.sqMap, r.sqes, r.cqes = nil, nil, nil, nil, nil
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}

package uring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// EnableParam is the kernel switch for FUSE over io_uring (default N).
const EnableParam = "/sys/module/fuse/parameters/enable_uring"

// KernelSupport says why the kernel will not offer FUSE over io_uring at
// INIT, or "" when it will.
func KernelSupport() string {
	b, err := os.ReadFile(EnableParam)
	if errors.Is(err, os.ErrNotExist) {
		return "this kernel has no FUSE over io_uring (CONFIG_FUSE_IO_URING, Linux 6.14+)"
	}
	if err != nil {
		return fmt.Sprintf("reading %s: %v", EnableParam, err)
	}
	if v := strings.TrimSpace(string(b)); v != "Y" && v != "1" {
		return fmt.Sprintf("FUSE over io_uring is off in the kernel: set %s=Y", EnableParam)
	}
	return ""
}

// PossibleCPUs is the kernel's num_possible_cpus(): the number of queues
// the kernel expects, every one registered before it sends a request.
func PossibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("counting possible CPUs: %w", err)
	}
	return parseCPUList(string(b))
}

// parseCPUList counts the CPUs of a kernel CPU list ("0-3,8,10-11").
func parseCPUList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, ok := strings.Cut(part, "-")
		if !ok {
			hi = lo
		}
		l, err1 := strconv.Atoi(lo)
		h, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || h < l {
			return 0, fmt.Errorf("counting possible CPUs: bad range %q", part)
		}
		n += h - l + 1
	}
	return n, nil
}

// Buffer memory. Every entry holds a 288-byte header and a payload buffer
// the kernel requires to be at least max_write, so the transport pins
//
//	Queues × Depth × (Payload + 288) bytes.
//
// Plan keeps that within MemoryBudget: Depth up to MaxDepth entries per
// queue at Payload = the wanted max_write, then fewer entries (down to one
// per queue), then smaller payloads (down to MinPayload: the kernel splits
// larger writes and reads into several requests). Only more than
// MemoryBudget/MinPayload (1024) possible CPUs exceed the budget, at
// Queues × (MinPayload + 288).
const (
	MemoryBudget = 64 << 20
	MaxDepth     = 8
	MinPayload   = 64 << 10
	headerSize   = 288
)

// Plan is the shape of the rings: Queues rings of Depth entries, each
// entry with a Payload-byte buffer. Payload is the max_write to negotiate.
type Plan struct {
	Queues, Depth, Payload int
}

// NewPlan sizes the rings for queues CPUs and a wanted max_write.
func NewPlan(queues, maxWrite int) Plan {
	p := Plan{Queues: max(queues, 1), Payload: max(maxWrite, MinPayload)}
	p.Depth = min(MaxDepth, MemoryBudget/(p.Queues*p.Payload))
	if p.Depth < 1 {
		p.Depth = 1
		p.Payload = max(MinPayload, MemoryBudget/p.Queues&^(os.Getpagesize()-1))
	}
	return p
}

// Bytes is the buffer memory the plan pins.
func (p Plan) Bytes() int { return p.Queues * p.Depth * (p.Payload + headerSize) }

func (p Plan) String() string {
	return fmt.Sprintf("%d queues × %d entries × %d KiB", p.Queues, p.Depth, p.Payload>>10)
}

// Handler answers one request: in is the request (header, operation
// struct, payload), out receives the reply as one byte stream; it returns
// the reply's length. *fuse.ProtocolServer is one.
type Handler interface {
	HandleRequest(in, out [][]byte) (int, fuse.Status)
}

// Transport is a set of rings, one per possible CPU, each with its pinned
// thread. Prepare builds it before the mount (so a kernel or sandbox that
// refuses io_uring is known before INIT is answered); Start registers the
// entries once INIT has negotiated FUSE_OVER_IO_URING; the threads end
// when the kernel tears the rings down at unmount (or on Close).
type Transport struct {
	plan   Plan
	queues []*queue
	wg     sync.WaitGroup
	log    func(string)
	fdMu   sync.Mutex // guards fd: Wait may run in several goroutines
	fd     int        // our dup of the /dev/fuse fd, closed when the threads are done
}

// Prepare creates the rings and buffers for plan on pinned threads. log
// receives the transport's error lines (the classic path's equivalents go
// to the same logger).
func Prepare(plan Plan, log func(string)) (*Transport, error) {
	t := &Transport{plan: plan, log: log, fd: -1}
	ready := make(chan error, plan.Queues)
	for qid := 0; qid < plan.Queues; qid++ {
		q := &queue{t: t, qid: qid, start: make(chan startMsg, 1), efd: -1}
		t.queues = append(t.queues, q)
		t.wg.Add(1)
		go q.run(ready)
	}
	var errs []error
	for range plan.Queues {
		if err := <-ready; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.Close()
		return nil, fmt.Errorf("io_uring transport: %w", errors.Join(errs...))
	}
	return t, nil
}

// Requests is the number of requests answered through the rings.
func (t *Transport) Requests() uint64 {
	var n uint64
	for _, q := range t.queues {
		n += q.served.Load()
	}
	return n
}

// Plan returns the shape the transport runs with.
func (t *Transport) Plan() Plan { return t.plan }

// Start registers every entry of every queue on the /dev/fuse connection
// fuseFd (duplicated here: the classic loop closes its fd at unmount
// while a queue may still commit) and serves requests with h. It returns
// once all entries are registered: from then on the kernel sends every
// request but FORGET and INTERRUPT through the rings.
func (t *Transport) Start(fuseFd int, h Handler, offload func(opcode uint32) bool) error {
	fd, err := unix.FcntlInt(uintptr(fuseFd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Close()
		return fmt.Errorf("io_uring transport: dup of the FUSE fd: %w", err)
	}
	t.fd = fd
	done := make(chan error, len(t.queues))
	for _, q := range t.queues {
		q.start <- startMsg{fd: fd, h: h, offload: offload, registered: done}
	}
	var errs []error
	for range t.queues {
		if err := <-done; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("io_uring transport: registering with the kernel: %w", errors.Join(errs...))
	}
	return nil
}

// Close stops queues that were never started and waits for the others to
// end (they end when the kernel tears the connection down).
func (t *Transport) Close() {
	for _, q := range t.queues {
		select {
		case q.start <- startMsg{}:
		default:
		}
	}
	t.Wait()
}

// Wait waits for every queue thread to end and releases the rings and
// buffers.
func (t *Transport) Wait() {
	t.wg.Wait()
	t.fdMu.Lock()
	if t.fd >= 0 {
		_ = unix.Close(t.fd)
		t.fd = -1
	}
	t.fdMu.Unlock()
}

type startMsg struct {
	fd         int // 0 with h nil: stop without serving
	h          Handler
	offload    func(opcode uint32) bool
	registered chan<- error
}

// queue is one ring with its entries, served by one thread pinned to CPU
// qid: the kernel puts a request on the queue of the CPU its caller runs
// on and completes it in the task that armed the entry, so the request,
// its copy into our buffers and its reply stay on one CPU.
type queue struct {
	t      *Transport
	qid    int
	start  chan startMsg
	r      *ring
	mem    []byte  // headers then payloads, one anonymous mapping
	ents   []entry // Depth entries
	iovs   [][2]unix.Iovec
	armed  int           // entries the kernel holds (registered or committed, no CQE yet)
	served atomic.Uint64 // requests answered through this ring
	efd    int           // eventfd: handlers wake the sleeping ring thread
	efdBuf [8]byte       // the eventfd read's target

	mu       sync.Mutex // guards done, spare, sleeping and closing efd
	done     []int      // entries whose reply is ready to commit
	spare    []int
	sleeping bool // the ring thread waits in io_uring_enter: wake it
}

type entry struct {
	hdr     []byte // 288 bytes: in_out[128], op_in[128], ring_ent_in_out[32]
	payload []byte
	inCopy  []byte // a request's small payload, copied before the reply may overwrite it
	// committed: the entry's last command was COMMIT_AND_FETCH (not
	// REGISTER); only the ring thread reads and writes it.
	committed bool
}

// fuse_uring_req_header and fuse_uring_cmd_req offsets.
const (
	hdrOpIn      = 128
	hdrCommitID  = 256 + 8
	hdrPayloadSz = 256 + 16
	inHeaderSize = 40
	outHdrSize   = 16

	cmdRegister       = 1
	cmdCommitAndFetch = 2
)

func (q *queue) run(ready chan<- error) {
	defer q.t.wg.Done()
	// The thread is never handed back to the scheduler: a ring's completions
	// run in the thread that armed its entries, pinned to the queue's CPU.
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(q.qid)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		// A CPU that is possible but offline: the queue still has to be
		// registered; its thread runs anywhere.
		q.t.log(fmt.Sprintf("io_uring queue %d: pinning to CPU %d: %v", q.qid, q.qid, err))
	}
	err := q.setup()
	ready <- err
	if err != nil {
		q.release()
		return
	}
	msg := <-q.start
	if msg.h == nil {
		q.release()
		return
	}
	err = q.register(msg.fd)
	msg.registered <- err
	if err == nil {
		ringThreads.Store(unix.Gettid(), true)
		q.serve(msg.fd, msg.h, msg.offload)
		ringThreads.Delete(unix.Gettid())
	}
	q.release()
}

func (q *queue) setup() error {
	p := q.t.plan
	var err error
	if q.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		q.efd = -1
		return fmt.Errorf("queue %d: eventfd: %w", q.qid, err)
	}
	if q.r, err = newRing(uint32(p.Depth + 1)); err != nil {
		return fmt.Errorf("queue %d: %w", q.qid, err)
	}
	page := os.Getpagesize()
	hdrBytes := (p.Depth*headerSize + page - 1) &^ (page - 1)
	q.mem, err = unix.Mmap(-1, 0, hdrBytes+p.Depth*p.Payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("queue %d: buffers: %w", q.qid, err)
	}
	q.ents = make([]entry, p.Depth)
	q.iovs = make([][2]unix.Iovec, p.Depth)
	for i := range q.ents {
		e := &q.ents[i]
		e.hdr = q.mem[i*headerSize : (i+1)*headerSize : (i+1)*headerSize]
		off := hdrBytes + i*p.Payload
		e.payload = q.mem[off : off+p.Payload : off+p.Payload]
		q.iovs[i][0] = unix.Iovec{Base: &e.hdr[0]}
		q.iovs[i][0].SetLen(headerSize)
		q.iovs[i][1] = unix.Iovec{Base: &e.payload[0]}
		q.iovs[i][1].SetLen(p.Payload)
	}
	return nil
}

func (q *queue) release() {
	if q.r != nil {
		q.r.close()
		q.r = nil
	}
	q.mu.Lock()
	if q.efd >= 0 {
		_ = unix.Close(q.efd)
		q.efd = -1
	}
	q.mu.Unlock()
	if q.mem != nil {
		_ = unix.Munmap(q.mem)
		q.mem = nil
	}
}

// arm queues a REGISTER or COMMIT_AND_FETCH for entry i.
func (q *queue) arm(fd, i, op int) {
	s := q.r.next()
	if s == nil {
		// Cannot happen: the ring has Depth slots and at most Depth
		// entries are armed; submitted SQEs leave the ring at once.
		q.t.log(fmt.Sprintf("io_uring queue %d: submission ring full, entry %d dropped", q.qid, i))
		return
	}
	s.opcode = opURingCmd
	s.fd = int32(fd)
	s.off = uint64(op)
	s.addr = uint64(uintptr(unsafe.Pointer(&q.iovs[i][0])))
	s.len = 2
	s.userData = uint64(i)
	// struct fuse_uring_cmd_req: flags, commit_id, qid.
	if op == cmdCommitAndFetch {
		copy(s.cmd[8:16], q.ents[i].hdr[hdrCommitID:hdrCommitID+8])
	}
	binary.LittleEndian.PutUint16(s.cmd[16:18], uint16(q.qid))
	q.ents[i].committed = op == cmdCommitAndFetch
	q.armed++
}

func (q *queue) register(fd int) error {
	for i := range q.ents {
		q.arm(fd, i, cmdRegister)
	}
	// A registered entry stays in the kernel (no completion) until a
	// request comes; a refused one completes at once with the error.
	if err := q.r.enter(false); err != nil {
		return fmt.Errorf("queue %d: %w", q.qid, err)
	}
	if c := q.r.peek(); c != nil && c.res < 0 {
		return fmt.Errorf("queue %d: %w", q.qid, unix.Errno(-c.res))
	}
	return nil
}

// serve answers requests and commits each reply together with the fetch
// of the entry's next request. Most requests run in place on this thread:
// handing them to a goroutine costs two more thread wake-ups per request
// (the handler's, and this thread's to commit). Those for which offload
// says so run on their own goroutine, as go-fuse's classic loop runs every
// request: a handler that waits for the kernel (a page-cache invalidation
// waits for pages under read or writeback) may wait for a READ or WRITE
// queued on this very ring. Their replies come back through done, with an
// eventfd read armed in the ring to wake this thread when it sleeps.
func (q *queue) serve(fd int, h Handler, offload func(opcode uint32) bool) {
	stopping := false
	inflight := 0
	q.armWake()
	for q.armed > 0 || inflight > 0 {
		q.mu.Lock()
		done := q.done
		q.done = q.spare[:0]
		q.spare = done
		q.sleeping = len(done) == 0
		q.mu.Unlock()
		for _, i := range done {
			inflight--
			if !stopping {
				q.arm(fd, i, cmdCommitAndFetch)
			}
		}
		if err := q.r.enter(len(done) == 0); err != nil {
			q.t.log(fmt.Sprintf("io_uring queue %d: %v", q.qid, err))
			return
		}
		for c := q.r.peek(); c != nil; c = q.r.peek() {
			i, res := c.userData, c.res
			q.r.advance()
			if i == wakeTag {
				q.armWake()
				continue
			}
			q.armed--
			if res < 0 {
				// ENOTCONN, ECONNABORTED: the connection is going away
				// (unmount); replies still being made are dropped. Anything
				// else is logged, as the classic loop logs a failed read or
				// reply, and a failed commit's entry is registered again:
				// the kernel let go of it, and a queue that ran out of
				// entries would leave its CPU's callers waiting for ever.
				err := unix.Errno(-res)
				if err == unix.ENOTCONN || err == unix.ECONNABORTED || err == unix.ENODEV {
					stopping = true
					continue
				}
				q.t.log(fmt.Sprintf("io_uring queue %d: request exchange failed: %v", q.qid, err))
				if !stopping && i < uint64(len(q.ents)) && q.ents[i].committed {
					q.ents[i].committed = false
					q.arm(fd, int(i), cmdRegister)
				}
				continue
			}
			if i >= uint64(len(q.ents)) {
				continue
			}
			if offload != nil && offload(binary.LittleEndian.Uint32(q.ents[i].hdr[4:8])) {
				inflight++
				go func() { q.handle(int(i), h); q.finish(int(i)) }()
				continue
			}
			q.handle(int(i), h)
			q.served.Add(1)
			q.arm(fd, int(i), cmdCommitAndFetch)
		}
	}
}

// ringThreads holds the thread ids of the queues' threads (OnRingThread).
var ringThreads sync.Map

// OnRingThread reports whether the caller runs on a queue's thread, where
// it must not wait for the kernel to send another request.
func OnRingThread() bool {
	_, ok := ringThreads.Load(unix.Gettid())
	return ok
}

// wakeTag marks the eventfd read's completions.
const wakeTag = ^uint64(0)

const opRead = 22 // IORING_OP_READ

// armWake arms the read of the eventfd finished handlers write.
func (q *queue) armWake() {
	s := q.r.next()
	if s == nil {
		q.t.log(fmt.Sprintf("io_uring queue %d: submission ring full, wake-up read dropped", q.qid))
		return
	}
	s.opcode = opRead
	s.fd = int32(q.efd)
	s.addr = uint64(uintptr(unsafe.Pointer(&q.efdBuf[0])))
	s.len = 8
	s.off = ^uint64(0)
	s.userData = wakeTag
}

// finish hands entry i's reply back to the ring thread.
func (q *queue) finish(i int) {
	q.served.Add(1)
	// The write is made under mu: once the ring thread has taken the last
	// entry it may end and close the eventfd (release takes mu for that).
	q.mu.Lock()
	q.done = append(q.done, i)
	if q.sleeping {
		q.sleeping = false
		one := [8]byte{1}
		_, _ = unix.Write(q.efd, one[:])
	}
	q.mu.Unlock()
}

// handle decodes the request in e, has h answer it and leaves the reply in
// e: the out header in in_out, the reply's arguments in the payload.
func (q *queue) handle(i int, h Handler) {
	e := &q.ents[i]
	hdr := e.hdr
	length := int(binary.LittleEndian.Uint32(hdr[0:4]))
	opcode := binary.LittleEndian.Uint32(hdr[4:8])
	unique := binary.LittleEndian.Uint64(hdr[8:16])
	psz := int(binary.LittleEndian.Uint32(hdr[hdrPayloadSz : hdrPayloadSz+4]))
	// The kernel puts the operation's first argument (its in struct) in
	// op_in and the rest in the payload; the header's length covers all.
	opLen := length - inHeaderSize - psz
	if opLen < 0 || opLen > 128 || psz > len(e.payload) {
		q.t.log(fmt.Sprintf("io_uring queue %d: malformed request (opcode %d, length %d, payload %d)", q.qid, opcode, length, psz))
		q.replyErr(e, unique, unix.EIO)
		return
	}
	payload := e.payload[:psz]
	if psz > 0 && opcode != opWrite {
		// Names, xattr values, ioctl input: small, and the reply is
		// written over the same buffer (write data is consumed before
		// its 8-byte reply).
		e.inCopy = append(e.inCopy[:0], payload...)
		payload = e.inCopy
	}
	in := [][]byte{hdr[:inHeaderSize], hdr[hdrOpIn : hdrOpIn+opLen], payload}
	out := [][]byte{hdr[:outHdrSize], e.payload}
	n, st := h.HandleRequest(in, out)
	if st != fuse.OK || n < outHdrSize {
		q.replyErr(e, unique, unix.EIO)
		return
	}
	binary.LittleEndian.PutUint32(hdr[hdrPayloadSz:], uint32(n-outHdrSize))
}

const opWrite = 16 // FUSE_WRITE

func (q *queue) replyErr(e *entry, unique uint64, errno unix.Errno) {
	binary.LittleEndian.PutUint32(e.hdr[0:4], outHdrSize)
	binary.LittleEndian.PutUint32(e.hdr[4:8], uint32(-int32(errno)))
	binary.LittleEndian.PutUint64(e.hdr[8:16], unique)
	binary.LittleEndian.PutUint32(e.hdr[hdrPayloadSz:], 0)
}

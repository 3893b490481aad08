package fs

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/transport/uring"
)

// UringParamHint says how to switch the kernel's side on.
const UringParamHint = "echo Y > " + uring.EnableParam

// UringMode is -o uring: whether requests travel over io_uring.
type UringMode int

// The zero value is auto: the kernel offers io_uring only when switched on
// (enable_uring), and then the rings serve.
const (
	// UringAuto uses io_uring when the kernel offers it at INIT.
	UringAuto UringMode = iota
	// UringOff always uses read(2)/writev(2) on /dev/fuse.
	UringOff
	// UringOn fails the mount when the kernel does not offer it.
	UringOn
)

// ParseUringMode reads auto, on or off.
func ParseUringMode(s string) (UringMode, error) {
	switch s {
	case "auto":
		return UringAuto, nil
	case "on":
		return UringOn, nil
	case "off":
		return UringOff, nil
	}
	return 0, fmt.Errorf("uring=%s: want auto, on or off", s)
}

func (m UringMode) String() string { return [...]string{"auto", "off", "on"}[m] }

// Server is a mounted filesystem's FUSE server and, over io_uring, its
// rings. Unmount and Wait cover both.
type Server struct {
	*fuse.Server
	mountpoint string
	ring       *uring.Transport // nil: classic transport
	ownMount   bool             // mounted here with our own /dev/fuse fd
	procs      int              // Ps added for the server's threads (addProcs)
	procsOnce  sync.Once        // gives them back once
}

// Unmount unmounts the filesystem; the server then ends.
func (s *Server) Unmount() error {
	if !s.ownMount {
		return s.Server.Unmount()
	}
	// As go-fuse does: the kernel may still hold the last files briefly.
	var err error
	delay := time.Duration(0)
	for try := 0; try < 5; try++ {
		if err = syscall.Unmount(s.mountpoint, 0); err == nil {
			break
		}
		delay = 2*delay + 5*time.Millisecond
		time.Sleep(delay)
	}
	if err != nil {
		return fmt.Errorf("unmounting %s: %w", s.mountpoint, err)
	}
	s.Wait()
	return nil
}

// Wait waits until the filesystem is unmounted and every thread serving
// it (the /dev/fuse readers and the ring threads) has ended.
func (s *Server) Wait() {
	s.Server.Wait()
	if s.ring != nil {
		s.ring.Wait()
	}
	s.procsOnce.Do(func() { addProcs(-s.procs) })
}

// fuseReaders is how many go-fuse threads may sit in read(2) on /dev/fuse
// at once: go-fuse keeps up to GOMAXPROCS readers (at least 2, at most 16),
// plus the one that finds itself over the limit after its read.
func fuseReaders() int { return fuseReadersFor(runtime.GOMAXPROCS(0)) }

func fuseReadersFor(procs int) int { return min(max(procs, 2), 16) + 1 }

// serve adds Ps for the threads that wait in the kernel (the /dev/fuse
// readers, and the ring threads) once the server exists: go-fuse sized its
// readers from GOMAXPROCS before.
func (s *Server) serve(extra int) *Server {
	s.procs = fuseReaders() + extra
	addProcs(s.procs)
	return s
}

// procsMu serializes addProcs.
var procsMu sync.Mutex

// addProcs gives the Go runtime n more Ps (n < 0: fewer) while a server
// runs. A /dev/fuse reader sleeps in read(2) and a ring's thread in
// io_uring_enter, and the runtime counts a thread in a system call as
// holding its P until sysmon takes it back, 20 µs to 10 ms later: with
// every P held so, the journal committer, writeback and the handlers that
// left the rings would wait that long each time they wake, and sysmon
// kept polling every 20 µs, taking each P back and waking a spinning
// thread to hand it to: under rm -rf on 2 CPUs, sysmon and those hand-offs
// were a fifth of the daemon's CPU (perf). One more P per such thread
// leaves a P idle, so sysmon takes none and backs off.
func addProcs(n int) {
	procsMu.Lock()
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)+n))
	procsMu.Unlock()
}

// Transport names the transport requests use.
func (s *Server) Transport() string {
	if s.ring == nil {
		return "classic"
	}
	return "io_uring (" + s.ring.Plan().String() + ")"
}

// uringSetup decides, before the mount, whether to offer io_uring at
// INIT: with -o uring=auto only where the kernel would accept it, with
// on failing with the reason otherwise. It returns the prepared rings (nil
// for classic) and adjusts mo (max_write within the rings' buffers, the
// INIT flag).
func (f *FS) uringSetup(mode UringMode, mo *fuse.MountOptions) (*uring.Transport, error) {
	if mode == UringOff {
		return nil, nil
	}
	why := uring.KernelSupport()
	var tr *uring.Transport
	if why == "" {
		n, err := uring.PossibleCPUs()
		if err == nil {
			tr, err = uring.Prepare(uring.NewPlan(n, mo.MaxWrite), f.logTransport)
		}
		if err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		if mode == UringOn {
			return nil, fmt.Errorf("-o uring=on: %s", why)
		}
		if f.Log != nil {
			f.Log.Debug("FUSE over io_uring not used", zap.String("reason", why))
		}
		return nil, nil
	}
	mo.MaxWrite = tr.Plan().Payload
	mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	return tr, nil
}

func (f *FS) logTransport(msg string) {
	if f.Log != nil {
		f.Log.Error(msg)
	}
}

// newServer mounts raw at mountpoint with our own /dev/fuse fd, handed to
// go-fuse as its /dev/fd/N mount point: over io_uring because the rings
// are registered on that fd, and on both transports because go-fuse then
// skips its poll probe (WaitMount's pollHack), in which the daemon opens a
// file on its own new mount: a SIGKILL during that open left the daemon
// waiting on itself, unkillable until the connection was aborted. Without
// the privilege to mount (EPERM) go-fuse mounts through fusermount, with
// its probe. go-fuse's server answers INIT, FORGET and INTERRUPT and sends
// notifications on the fd; over io_uring its ProtocolServer answers what
// comes on the rings.
func (f *FS) newServer(raw fuse.RawFileSystem, mountpoint string, mo *fuse.MountOptions, mode UringMode) (*Server, error) {
	tr, err := f.uringSetup(mode, mo)
	if err != nil {
		return nil, err
	}
	fd, err := mountFuseFd(mountpoint, mo)
	if tr == nil && errors.Is(err, syscall.EPERM) {
		srv, err := fuse.NewServer(raw, mountpoint, mo)
		if err != nil {
			return nil, err
		}
		return (&Server{Server: srv, mountpoint: mountpoint}).serve(0), nil
	}
	if err != nil {
		if tr != nil {
			tr.Close()
		}
		return nil, err
	}
	own := *mo
	own.DirectMount = false // the mount exists; go-fuse takes the fd
	srv, err := fuse.NewServer(raw, fmt.Sprintf("/dev/fd/%d", fd), &own)
	if err != nil {
		if tr != nil {
			tr.Close()
		}
		_ = syscall.Unmount(mountpoint, syscall.MNT_DETACH)
		return nil, err
	}
	s := &Server{Server: srv, mountpoint: mountpoint, ownMount: true}
	if tr == nil {
		return s.serve(0), nil
	}
	if srv.KernelSettings().Flags64()&fuse.CAP_OVER_IO_URING == 0 {
		// enable_uring was switched off between the check and INIT.
		tr.Close()
		if mode == UringOn {
			go srv.Serve()
			_ = s.Unmount()
			return nil, fmt.Errorf("-o uring=on: the kernel did not offer FUSE over io_uring at INIT: set %s=Y", uring.EnableParam)
		}
		return s.serve(0), nil
	}
	ps := fuse.NewProtocolServer(raw, &own)
	if err := initProtocolServer(ps, srv.KernelSettings()); err != nil {
		tr.Close()
		_ = syscall.Unmount(mountpoint, syscall.MNT_DETACH)
		return nil, err
	}
	if err := tr.Start(fd, ps, f.offload); err != nil {
		// A refused registration turns the connection back to classic
		// (the kernel clears io_uring); with on, that is a failed mount.
		tr.Close()
		if mode == UringOn {
			go srv.Serve()
			_ = s.Unmount()
			return nil, fmt.Errorf("-o uring=on: %w", err)
		}
		f.logTransport(err.Error() + "; serving over /dev/fuse")
		return s.serve(0), nil
	}
	s.ring = tr
	return s.serve(tr.Plan().Queues), nil
}

// offload says which requests must not run on a ring's own thread: those
// that may wait for the kernel, which may wait for a request queued on
// that ring. LSEEK makes the kernel write dirty pages back (cache.go); a
// WRITE drops cached pages, and waits for pages under read, while any
// file has the cached mark. Everything else runs in place.
//
// What a deadlock here looks like (seen when LSEEK still ran in place):
// the ring thread's SEEK_DATA invalidates the file's pages; the kernel
// launders a dirty page (fuse_launder_folio) by sending a writeback WRITE,
// queued on the CPU of the thread that asked, i.e. on this very ring, and
// waits for it (folio_wait_writeback) inside the notification's writev.
// The thread never comes back to fetch it. Killing the daemon does not end
// it: the stuck thread keeps /dev/fuse open, so the connection is never
// released, and the process stays a zombie with that one thread in D state.
// Any later xfs_io on the machine then hangs too: xfs_io stats every mount
// point in /proc/self/mounts at start, and a GETATTR to that mount is never
// answered (the "TestDirectIOMmap hang" was such a bystander: its xfs_io
// had not yet opened its file).
func (f *FS) offload(opcode uint32) bool {
	const opWrite, opLseek = 16, 46
	return opcode == opLseek || opcode == opWrite && f.cachedFiles.Load() > 0
}

// initProtocolServer replays the kernel's INIT into ps, so it decodes
// requests for the protocol version and flags the connection negotiated
// (the real INIT went to the /dev/fuse server).
func initProtocolServer(ps *fuse.ProtocolServer, kernel *fuse.InitIn) error {
	const opInit = 26
	in := *kernel
	in.InHeader = fuse.InHeader{Opcode: opInit, Unique: 1}
	body := unsafeBytes(&in)
	in.Length = uint32(len(body))
	out := make([]byte, 256)
	n, st := ps.HandleRequest([][]byte{body}, [][]byte{out})
	if !st.Ok() || n < 16 {
		return fmt.Errorf("io_uring transport: setting up the request decoder: %v", st)
	}
	if errno := int32(out[4]) | int32(out[5])<<8 | int32(out[6])<<16 | int32(out[7])<<24; errno != 0 {
		return fmt.Errorf("io_uring transport: setting up the request decoder: %w", syscall.Errno(-errno))
	}
	return nil
}

// mountFuseFd opens /dev/fuse and mounts it at mountpoint as go-fuse's
// direct mount does, returning the fd.
func mountFuseFd(mountpoint string, mo *fuse.MountOptions) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return -1, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	fd, err := syscall.Open("/dev/fuse", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	data := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&syscall.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", mo.MaxWrite),
	}
	data = append(data, mo.Options...)
	if mo.AllowOther {
		data = append(data, "allow_other")
	}
	source := mo.FsName
	if source == "" {
		source = mo.Name
	}
	if err := syscall.Mount(source, mountpoint, "fuse."+mo.Name, mo.DirectMountFlags, strings.Join(data, ",")); err != nil {
		_ = syscall.Close(fd)
		return -1, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	return fd, nil
}

// unsafeBytes is the memory of *p, for the kernel structs replayed above.
func unsafeBytes[T any](p *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

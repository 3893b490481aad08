package fs

import (
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/fs/meta"
)

// MountOptions are the FUSE-level mount choices.
type MountOptions struct {
	Source         string // device or image path, shown by df
	ReadOnly       bool
	AllowOther     bool
	Debug          bool
	PlacementCache bool
	// NoSuid, NoDev and NoExec are the mount flags; a root mount allows
	// set-id bits, device nodes and execution unless told otherwise, as a
	// kernel filesystem does.
	NoSuid, NoDev, NoExec bool
	Atime                 AtimeMode
	// NodeLimit bounds the nodes the daemon keeps for inodes the kernel
	// caches (nodes.go); 0: no bound.
	NodeLimit int
	// Uring is -o uring: FUSE requests over io_uring (transport.go).
	Uring UringMode
}

// Mount mounts f at mountpoint and returns the running server.
func Mount(f *FS, mountpoint string, o MountOptions) (*Server, error) {
	f.PlacementCache = o.PlacementCache
	f.Atime = o.Atime
	timeout := cacheTimeout
	flags := MountFlags(o)
	mo := fuse.MountOptions{
		AllowOther: o.AllowOther,
		FsName:     o.Source,
		Name:       "streamfs",
		// The kernel takes up to 1 MiB per request; go-fuse's default is 128 KiB.
		MaxWrite:      1 << 20,
		MaxBackground: maxBackground,
		// The kernel checks permissions against the modes we report.
		Options:          []string{"default_permissions"},
		DirectMount:      true,
		DirectMountFlags: flags,
		Debug:            o.Debug,
		// HANDLE_KILLPRIV_V2: the kernel stops asking for security.capability
		// before every write; we clear setuid/setgid and capabilities
		// ourselves. ASYNC_DIO: io_submit does not block on direct I/O.
		// IOCTL_DIR: ioctls on directories (streams by directory, fstrim).
		// DIRECT_IO_ALLOW_MMAP: mmap(MAP_SHARED) of an O_DIRECT open (6.6+).
		// EXPORT_SUPPORT: file handles resolve by inode number (LookupNode).
		// WRITEBACK_CACHE: buffered writes go through the page cache (writeback.go).
		ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_ASYNC_DIO | fuse.CAP_IOCTL_DIR |
			fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_EXPORT_SUPPORT | fuse.CAP_WRITEBACK_CACHE,
	}
	mo.Logger = f.fuseLogger()
	f.aclMountOptions(&mo)
	opts := &gofs.Options{
		MountOptions:    mo,
		AttrTimeout:     &timeout,
		EntryTimeout:    &timeout,
		NegativeTimeout: &timeout,
		NullPermissions: true,
		// stat of the mount point reports the root's real inode number.
		RootStableAttr: &gofs.StableAttr{Ino: meta.RootIno, Mode: syscall.S_IFDIR, Gen: uint64(f.Store.Root().Attr().Gen)},
		// Node ids are inode numbers, so file handles outlive the kernel's
		// inode cache and the mount (name_to_handle_at, NFS re-export).
		ExternalNodeID: true,
	}
	root := NewRoot(f)
	raw := syncWritesFS{RawFileSystem: countingFS{RawFileSystem: gofs.NewNodeFS(root, opts), c: &f.ops}, fs: f}
	srv, err := f.newServer(f.aclRaw(raw), mountpoint, &opts.MountOptions, o.Uring)
	if err != nil {
		return nil, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	f.setServer(srv.Server, srv.Transport())
	f.nodes.setLimit(o.NodeLimit)
	stop := make(chan struct{})
	go func() { srv.Wait(); close(stop) }()
	go f.sweepNodes(srv.Server, stop)
	if err := setReadahead(mountpoint, readaheadKB); err != nil && f.Log != nil {
		f.Log.Warn("read-ahead left at the kernel's default", zap.Error(err))
	}
	tuneWriteback(mountpoint, f.Log)
	return srv, nil
}

// maxBackground is the kernel's limit of background requests (readahead,
// writeback, async direct I/O) in flight to the daemon.
const maxBackground = 64

// readaheadKB is the mount's read-ahead window. The kernel starts a FUSE
// mount at 128 KiB and cannot be asked for more at INIT; with 1 MiB
// requests (max_pages 256) a window of several requests keeps the daemon
// and the device busy while the reader copies.
const readaheadKB = 4096

// setReadahead sets the read-ahead of the mount's backing device info,
// /sys/class/bdi/MAJOR:MINOR/read_ahead_kb, as blockdev --setra does for
// a disk.
func setReadahead(mountpoint string, kb int) error {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return fmt.Errorf("stat %s: %w", mountpoint, err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(p, []byte(strconv.Itoa(kb)), 0o644); err != nil {
		return fmt.Errorf("setting read-ahead: %w", err)
	}
	return nil
}

// MountFlags returns the mount(2) flags for o.
func MountFlags(o MountOptions) uintptr {
	var flags uintptr
	if o.ReadOnly {
		flags |= syscall.MS_RDONLY
	}
	if o.NoSuid {
		flags |= syscall.MS_NOSUID
	}
	if o.NoDev {
		flags |= syscall.MS_NODEV
	}
	if o.NoExec {
		flags |= syscall.MS_NOEXEC
	}
	switch o.Atime {
	case AtimeStrict:
		flags |= syscall.MS_STRICTATIME
	case AtimeNone:
		flags |= syscall.MS_NOATIME
	default:
		flags |= syscall.MS_RELATIME
	}
	return flags
}

// zapWriter sends go-fuse's debug trace to the logger, one entry a line
// (go-fuse's lines end in a newline that would show as a blank line).
// fuseLogger routes go-fuse's own log lines (its debug trace, and notes
// such as a read too large to splice) into the daemon's log at debug
// level, whether or not -o debug is on: left to go-fuse they went raw to
// stderr, hundreds of them in a run.
func (f *FS) fuseLogger() *log.Logger {
	if f.Log == nil {
		return nil
	}
	return log.New(&zapWriter{f.Log}, "", 0)
}

type zapWriter struct{ l *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(string(p), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			w.l.Debug(line, zap.String("src", "fuse"))
		}
	}
	return len(p), nil
}

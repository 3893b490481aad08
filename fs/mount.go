package fs

import (
	"fmt"
	"log"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"

	"github.com/streamfs/streamfs/fs/meta"
)

// MountOptions are the FUSE-level mount choices.
type MountOptions struct {
	Source         string // device or image path, shown by df
	ReadOnly       bool
	AllowOther     bool
	Debug          bool
	PlacementCache bool
}

// Mount mounts f at mountpoint and returns the running server.
func Mount(f *FS, mountpoint string, o MountOptions) (*fuse.Server, error) {
	f.PlacementCache = o.PlacementCache
	timeout := cacheTimeout
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
	if o.ReadOnly {
		flags |= syscall.MS_RDONLY
	}
	mo := fuse.MountOptions{
		AllowOther: o.AllowOther,
		FsName:     o.Source,
		Name:       "streamfs",
		// The kernel takes up to 1 MiB per request; go-fuse's default is 128 KiB.
		MaxWrite:      1 << 20,
		MaxBackground: 64,
		// The kernel checks permissions against the modes we report.
		Options:          []string{"default_permissions"},
		DirectMount:      true,
		DirectMountFlags: flags,
		Debug:            o.Debug,
		// HANDLE_KILLPRIV_V2: the kernel stops asking for security.capability
		// before every write; we clear setuid/setgid and capabilities
		// ourselves. ASYNC_DIO: io_submit does not block on direct I/O.
		// IOCTL_DIR: ioctls on directories (streams by directory, fstrim).
		ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_ASYNC_DIO | fuse.CAP_IOCTL_DIR,
	}
	if o.Debug && f.Log != nil {
		mo.Logger = log.New(&zapWriter{f.Log}, "", 0)
	}
	opts := &gofs.Options{
		MountOptions:    mo,
		AttrTimeout:     &timeout,
		EntryTimeout:    &timeout,
		NullPermissions: true,
		// stat of the mount point reports the root's real inode number.
		RootStableAttr: &gofs.StableAttr{Ino: meta.RootIno, Mode: syscall.S_IFDIR},
	}
	root := NewRoot(f)
	srv, err := gofs.Mount(mountpoint, root, opts)
	if err != nil {
		return nil, fmt.Errorf("mounting FUSE at %s: %w", mountpoint, err)
	}
	return srv, nil
}

// zapWriter sends go-fuse's debug trace to the logger.
type zapWriter struct{ l *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	w.l.Debug(string(p))
	return len(p), nil
}

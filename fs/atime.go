package fs

import (
	"time"

	"github.com/streamfs/streamfs/fs/meta"
)

// AtimeMode is the mount's access-time policy, as the kernel defines it.
// FUSE inodes carry S_NOATIME in the kernel, so the daemon keeps atime.
type AtimeMode int

const (
	// AtimeRelative (relatime, the default) updates atime when it is not
	// newer than mtime or ctime, or is more than a day old.
	AtimeRelative AtimeMode = iota
	// AtimeStrict (strictatime) updates atime on every access.
	AtimeStrict
	// AtimeNone (noatime) never updates atime on access.
	AtimeNone
)

// String is the mount option name.
func (m AtimeMode) String() string {
	switch m {
	case AtimeStrict:
		return "strictatime"
	case AtimeNone:
		return "noatime"
	}
	return "relatime"
}

// relatimeWindow is the kernel's: an atime older than a day is refreshed.
const relatimeWindow = 24 * time.Hour

// needAtime reports whether an access at now updates atime under mode.
func needAtime(mode AtimeMode, atime, mtime, ctime, now int64) bool {
	switch mode {
	case AtimeNone:
		return false
	case AtimeStrict:
		return true
	}
	return atime <= mtime || atime <= ctime || now-atime >= int64(relatimeWindow)
}

// touchAtime records an access to in (a read or a readdir).
func (f *FS) touchAtime(in *meta.Inode) {
	if f.Atime == AtimeNone || f.Store.ReadOnly() {
		return
	}
	a := in.Attr()
	t := time.Now().UnixNano()
	if needAtime(f.Atime, a.Atime, a.Mtime, a.Ctime, t) {
		f.Store.TouchAtime(in, t)
	}
}

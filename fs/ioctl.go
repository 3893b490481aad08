package fs

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/streamfs/streamfs/ioctl"
)

// Ioctl implements gofs.NodeIoctler. Dispatch is on the full 32-bit
// command: number 135 of type 'f' is also FS_IOC_READ_VERITY_METADATA.
func (n *Node) Ioctl(ctx context.Context, f gofs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	switch cmd {
	case ioctl.FS_IOC_WRITE_STREAM:
		return 0, n.writeStream(ctx, f, input, output)
	case ioctl.FITRIM:
		return 0, n.fitrim(ctx, input, output)
	case ioctl.STREAMFS_IOC_QUERY:
		return 0, n.query(input, output)
	case ioctl.FS_IOC_SHUTDOWN:
		return 0, n.shutdown(ctx, arg, output)
	case ioctl.STREAMFS_IOC_REMOUNT:
		return 0, n.remount(ctx, input, output)
	}
	return 0, syscall.ENOTTY
}

// writeStream implements FS_IOC_WRITE_STREAM with the seed's semantics, in
// the seed's order. Every success fills the whole 16-byte output: go-fuse
// returns the output buffer from a pool that is not zeroed.
func (n *Node) writeStream(ctx context.Context, f gofs.FileHandle, input, output []byte) syscall.Errno {
	ws, err := ioctl.DecodeWriteStream(input)
	if err != nil || len(output) < ioctl.WriteStreamSize {
		return syscall.EINVAL
	}
	if ws.Rsvd != 0 {
		return syscall.EINVAL
	}
	st := n.fs.Store
	switch ws.OpFlags {
	case ioctl.OpGetMax:
		ws.StreamID = st.MaxStreams()
	case ioctl.OpGet:
		ws.StreamID = n.in.Attr().Stream
	case ioctl.OpSet:
		if e := n.mayChangeStream(ctx, f); e != 0 {
			return e
		}
		// Compare the full 32-bit id (the seed's u16 would wrap 65537 to 1).
		if ws.StreamID > st.MaxStreams() {
			return syscall.EINVAL
		}
		if err := st.SetStream(n.in, ws.StreamID); err != nil {
			return errno(err)
		}
		// ctime moved, and the kernel does not know: it caches attributes long.
		n.fs.InvalidateAttr(n.in)
	default:
		return syscall.EINVAL
	}
	if err := ws.Encode(output); err != nil {
		return syscall.EINVAL
	}
	return 0
}

// mayChangeStream: a file needs a descriptor open for writing (EBADF
// otherwise). A directory cannot be opened for writing, so there the
// caller must own it or be allowed to write it, as FS_IOC_FSSETXATTR asks.
func (n *Node) mayChangeStream(ctx context.Context, f gofs.FileHandle) syscall.Errno {
	if !n.in.IsDir() {
		if h, ok := f.(*handle); ok && writable(h.flags) {
			return 0
		}
		return syscall.EBADF
	}
	uid, gid := caller(ctx)
	a := n.in.Attr()
	switch {
	case uid == 0 || uid == a.UID:
		return 0
	case a.Mode&0o002 != 0:
		return 0
	case a.Mode&0o020 != 0 && (gid == a.GID || inGroup(callerPID(ctx), a.GID)):
		return 0
	}
	return syscall.EPERM
}

// inGroup reports whether process pid has gid among its supplementary
// groups. FUSE requests carry only the primary group, so they are read
// from /proc, as libfuse's fuse_getgroups does.
func inGroup(pid uint32, gid uint32) bool {
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Groups:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if g, err := strconv.ParseUint(f, 10, 32); err == nil && uint32(g) == gid {
				return true
			}
		}
		return false
	}
	return false
}

// fitrim discards free space (fstrim). Like the kernel, it needs root.
func (n *Node) fitrim(ctx context.Context, input, output []byte) syscall.Errno {
	if uid, _ := caller(ctx); uid != 0 {
		return syscall.EPERM
	}
	r, err := ioctl.DecodeFstrimRange(input)
	if err != nil || len(output) < ioctl.FstrimRangeSize {
		return syscall.EINVAL
	}
	sb := n.fs.Store.Super()
	bs := uint64(sb.BlockSize)
	total := sb.TotalBlocks
	// XFS's checks: a start past the end, a range shorter than a block or
	// a minimum larger than an AG is invalid.
	if r.Start >= total*bs || r.Len < bs || r.MinLen > uint64(sb.AGBlocks)*bs {
		return syscall.EINVAL
	}
	lo := r.Start / bs
	hi := total
	if end := r.Start + r.Len; end > r.Start && end/bs < hi {
		hi = end / bs
	}
	trimmed, err := n.fs.Store.TrimRange(lo, hi, (r.MinLen+bs-1)/bs)
	if err != nil {
		return errno(err)
	}
	if n.fs.Log != nil {
		n.fs.Log.Debug("fitrim", zap.Uint64("start_block", lo), zap.Uint64("end_block", hi), zap.Uint64("trimmed_blocks", trimmed))
	}
	r.Len = trimmed * bs
	if err := r.Encode(output); err != nil {
		return syscall.EINVAL
	}
	return 0
}

// shutdown implements FS_IOC_SHUTDOWN. The command is _IOR, so FUSE
// copies no argument in, although the flags are the caller's input: read
// them from the caller's memory, and write them back unchanged (FUSE copies
// our output over the caller's variable).
func (n *Node) shutdown(ctx context.Context, arg uint64, output []byte) syscall.Errno {
	if uid, _ := caller(ctx); uid != 0 {
		return syscall.EPERM
	}
	buf := make([]byte, 4)
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(4)
	remote := []unix.RemoteIovec{{Base: uintptr(arg), Len: 4}}
	if c, err := unix.ProcessVMReadv(int(callerPID(ctx)), local, remote, 0); err != nil || c != 4 {
		return syscall.EFAULT
	}
	flags, _ := ioctl.DecodeU32(buf)
	if err := n.fs.Store.Shutdown(flags); err != nil {
		return errno(err)
	}
	if n.fs.Log != nil {
		n.fs.Log.Warn("shut down by FS_IOC_SHUTDOWN", zap.Uint32("flags", flags), zap.Uint32("pid", callerPID(ctx)))
	}
	if err := ioctl.EncodeU32(output, flags); err != nil {
		return syscall.EINVAL
	}
	return 0
}

// remount hears of a remount from the mount helper (the kernel does not
// tell a FUSE daemon) and turns the store read-only or read-write.
func (n *Node) remount(ctx context.Context, input, output []byte) syscall.Errno {
	if uid, _ := caller(ctx); uid != 0 {
		return syscall.EPERM
	}
	v, err := ioctl.DecodeU32(input)
	if err != nil || len(output) < 4 {
		return syscall.EINVAL
	}
	ro := v&ioctl.RemountReadOnly != 0
	if err := n.fs.Store.SetReadOnly(ro); err != nil {
		if n.fs.Log != nil {
			n.fs.Log.Warn("remount refused", zap.Bool("read_only", ro), zap.Error(err))
		}
		return errno(err)
	}
	if n.fs.Log != nil {
		n.fs.Log.Info("remounted", zap.Bool("read_only", ro))
	}
	_ = ioctl.EncodeU32(output, v)
	return 0
}

// query serves the tools' paged JSON documents.
func (n *Node) query(input, output []byte) syscall.Errno {
	q, err := ioctl.DecodeQuery(input)
	if err != nil || len(output) < ioctl.QueryPageSize {
		return syscall.EINVAL
	}
	// A document larger than a page is read in several calls: serve them
	// all from the snapshot taken at offset 0, so the pages fit together.
	n.qmu.Lock()
	defer n.qmu.Unlock()
	if q.Offset > 0 && n.qkind == q.Kind && n.qdoc != nil {
		if err := ioctl.EncodeQueryPage(output, n.qdoc, q.Offset); err != nil {
			return syscall.EINVAL
		}
		return 0
	}
	var doc []byte
	switch q.Kind {
	case ioctl.QueryBmap:
		if !n.in.IsReg() {
			return syscall.EINVAL
		}
		doc, err = bmapDoc(n.fs.Store, n.in)
	case ioctl.QueryStats:
		doc, err = statsDoc(n.fs)
	case ioctl.QueryInfo:
		doc, err = infoDoc(n.fs.Store)
	case ioctl.QueryStream:
		a := n.in.Attr()
		doc, err = json.Marshal(StreamDoc{Stream: a.Stream, StreamSource: StreamSourceName(a.StreamSrc)})
	default:
		return syscall.EINVAL
	}
	if err != nil {
		return syscall.EIO
	}
	n.qkind, n.qdoc = q.Kind, doc
	if err := ioctl.EncodeQueryPage(output, doc, q.Offset); err != nil {
		return syscall.EINVAL
	}
	return 0
}

package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

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
		ws.StreamID = st.Allocator().MaxStreams()
	case ioctl.OpGet:
		ws.StreamID = n.in.Attr().Stream
	case ioctl.OpSet:
		if e := n.mayChangeStream(ctx, f); e != 0 {
			return e
		}
		// Compare the full 32-bit id (the seed's u16 would wrap 65537 to 1).
		if ws.StreamID > st.Allocator().MaxStreams() {
			return syscall.EINVAL
		}
		if err := st.SetStream(n.in, ws.StreamID); err != nil {
			return errno(err)
		}
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
	case gid == a.GID && a.Mode&0o020 != 0:
		return 0
	case a.Mode&0o002 != 0:
		return 0
	}
	return syscall.EPERM
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
	bs := uint64(n.fs.Store.Super().BlockSize)
	trimmed, err := n.fs.Store.Trim((r.MinLen + bs - 1) / bs)
	if err != nil {
		return errno(err)
	}
	r.Len = trimmed * bs
	if err := r.Encode(output); err != nil {
		return syscall.EINVAL
	}
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

// Package ioctl is the user-space ABI of streamfs's write-stream interface:
// the FS_IOC_WRITE_STREAM command and struct fs_write_stream exactly as the
// XFS write-streams series defines them, a few neighbouring commands the
// filesystem must recognise (or refuse), byte-level encode/decode for the
// FUSE handler, and a tiny client for tools that call the ioctl on an open
// file. It contains no FUSE code and no policy: deciding what a stream id
// means, or whether a request is allowed, is the filesystem's job.
package ioctl

// The _IOC encoding. Linux packs an ioctl command as
// dir<<dirShift | size<<sizeShift | type<<typeShift | nr. The direction and
// size field widths differ on a few architectures (see ioc_*.go), but for
// read/write commands with a size below 8 KiB every architecture produces
// the same number, which is why the UAPI values below are portable.
const (
	iocNRBits   = 8
	iocTypeBits = 8

	iocNRShift   = 0
	iocTypeShift = iocNRShift + iocNRBits
	iocSizeShift = iocTypeShift + iocTypeBits
	iocDirShift  = iocSizeShift + iocSizeBits
)

// IOC builds an ioctl command number like the kernel's _IOC macro. It masks
// every field to its width rather than failing, exactly as the C macro
// silently truncates; callers pass compile-time constants.
func IOC(dir, typ, nr, size uint32) uint32 {
	return (dir&(1<<iocDirBits-1))<<iocDirShift |
		(size&(1<<iocSizeBits-1))<<iocSizeShift |
		(typ&(1<<iocTypeBits-1))<<iocTypeShift |
		(nr&(1<<iocNRBits-1))<<iocNRShift
}

// IOWR is the kernel's _IOWR: the caller passes a struct of size bytes that
// the kernel both reads and writes back.
func IOWR(typ, nr, size uint32) uint32 {
	return IOC(IOCRead|IOCWrite, typ, nr, size)
}

// IOCSize extracts the argument size from a command, like _IOC_SIZE. FUSE
// copies exactly this many bytes in and out for a restricted ioctl.
func IOCSize(cmd uint32) uint32 {
	return cmd >> iocSizeShift & (1<<iocSizeBits - 1)
}

// IOCDir extracts the direction bits from a command, like _IOC_DIR.
func IOCDir(cmd uint32) uint32 {
	return cmd >> iocDirShift & (1<<iocDirBits - 1)
}

// IOCType extracts the type (the "magic" character) from a command.
func IOCType(cmd uint32) uint32 {
	return cmd >> iocTypeShift & (1<<iocTypeBits - 1)
}

// IOCNr extracts the sequence number from a command.
func IOCNr(cmd uint32) uint32 {
	return cmd >> iocNRShift & (1<<iocNRBits - 1)
}

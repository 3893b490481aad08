//go:build ppc || ppc64 || ppc64le || mips || mipsle || mips64 || mips64le || sparc || sparc64

package ioctl

// PowerPC, MIPS and SPARC use a 13-bit size field and 3 direction bits with
// different values; without this the helpers would compute wrong numbers
// there (the fixed commands in this package happen to coincide anyway).
const (
	iocSizeBits = 13
	iocDirBits  = 3

	// IOCNone marks a command that passes no data.
	IOCNone = 1
	// IOCWrite marks a command whose argument user space writes (kernel reads).
	IOCWrite = 4
	// IOCRead marks a command whose argument the kernel writes back.
	IOCRead = 2
)

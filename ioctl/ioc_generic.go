//go:build !(ppc || ppc64 || ppc64le || mips || mipsle || mips64 || mips64le || sparc || sparc64)

package ioctl

// Direction bits and field widths of asm-generic/ioctl.h, used by x86,
// arm, arm64, riscv, loongarch and s390.
const (
	iocSizeBits = 14
	iocDirBits  = 2

	// IOCNone marks a command that passes no data.
	IOCNone = 0
	// IOCWrite marks a command whose argument user space writes (kernel reads).
	IOCWrite = 1
	// IOCRead marks a command whose argument the kernel writes back.
	IOCRead = 2
)

package ioctl

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestSizes(t *testing.T) {
	if got := unsafe.Sizeof(WriteStream{}); got != WriteStreamSize {
		t.Errorf("sizeof(WriteStream) = %d, want %d", got, WriteStreamSize)
	}
	if got := unsafe.Sizeof(FstrimRange{}); got != FstrimRangeSize {
		t.Errorf("sizeof(FstrimRange) = %d, want %d", got, FstrimRangeSize)
	}
	// The union member and rsvd must sit where the C struct has them, since
	// Do hands a *WriteStream straight to the kernel.
	var ws WriteStream
	if off := unsafe.Offsetof(ws.StreamID); off != 4 {
		t.Errorf("offsetof(stream_id) = %d, want 4", off)
	}
	if off := unsafe.Offsetof(ws.Rsvd); off != 8 {
		t.Errorf("offsetof(rsvd) = %d, want 8", off)
	}
}

func TestCommandNumbers(t *testing.T) {
	tests := []struct {
		name        string
		got, helper uint32
		want        uint32
	}{
		{"FS_IOC_WRITE_STREAM", FS_IOC_WRITE_STREAM, IOWR('f', 135, 16), 0xc0106687},
		{"FS_IOC_READ_VERITY_METADATA", FS_IOC_READ_VERITY_METADATA, IOWR('f', 135, 40), 0xc0286687},
		{"FITRIM", FITRIM, IOWR('X', 121, 24), 0xc0185879},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
		if tc.helper != tc.want {
			t.Errorf("IOWR for %s = %#x, want %#x", tc.name, tc.helper, tc.want)
		}
	}
	// Cross-check against x/sys, which generates its constants from the
	// kernel headers.
	if FS_IOC_READ_VERITY_METADATA != unix.FS_IOC_READ_VERITY_METADATA {
		t.Errorf("FS_IOC_READ_VERITY_METADATA = %#x, x/sys says %#x",
			FS_IOC_READ_VERITY_METADATA, uint32(unix.FS_IOC_READ_VERITY_METADATA))
	}
	if OpGetMax != 1 || OpGet != 2 || OpSet != 4 {
		t.Errorf("op flags = %d,%d,%d, want 1,2,4", OpGetMax, OpGet, OpSet)
	}
}

func TestIOCFields(t *testing.T) {
	cmd := FS_IOC_WRITE_STREAM
	if IOCSize(cmd) != 16 || IOCType(cmd) != 'f' || IOCNr(cmd) != 135 || IOCDir(cmd) != IOCRead|IOCWrite {
		t.Errorf("fields of %#x = size %d type %q nr %d dir %d", cmd,
			IOCSize(cmd), rune(IOCType(cmd)), IOCNr(cmd), IOCDir(cmd))
	}
	if IOCSize(FS_IOC_READ_VERITY_METADATA) != 40 {
		t.Errorf("verity size = %d, want 40", IOCSize(FS_IOC_READ_VERITY_METADATA))
	}
	// Oversized fields are truncated like the C macro does, not spilled
	// into the neighbouring field.
	if got := IOC(IOCNone, 'f', 0x1ff, 0); IOCType(got) != 'f' || IOCNr(got) != 0xff {
		t.Errorf("IOC with nr 0x1ff = %#x", got)
	}
}

func TestWriteStreamRoundTrip(t *testing.T) {
	in := WriteStream{OpFlags: OpSet, StreamID: 0xdeadbeef, Rsvd: 0x0102030405060708}
	b := in.Bytes()
	want := []byte{
		4, 0, 0, 0,
		0xef, 0xbe, 0xad, 0xde,
		8, 7, 6, 5, 4, 3, 2, 1,
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("Bytes() = % x, want % x", b, want)
	}
	out, err := DecodeWriteStream(b)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip = %+v, want %+v", out, in)
	}
	// Trailing bytes beyond the struct are ignored.
	out, err = DecodeWriteStream(append(b, 0xff))
	if err != nil || out != in {
		t.Errorf("decode with trailing byte = %+v, %v", out, err)
	}
	// The union reads back as max_streams.
	if (WriteStream{OpFlags: OpGetMax, StreamID: 8}).MaxStreams() != 8 {
		t.Error("MaxStreams does not alias StreamID")
	}
	// Encode into a larger buffer touches only the first 16 bytes.
	big := bytes.Repeat([]byte{0xaa}, 20)
	if err := in.Encode(big); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(big[:16], want) || !bytes.Equal(big[16:], []byte{0xaa, 0xaa, 0xaa, 0xaa}) {
		t.Errorf("Encode into 20 bytes = % x", big)
	}
}

func TestFstrimRangeRoundTrip(t *testing.T) {
	in := FstrimRange{Start: 1 << 40, Len: ^uint64(0), MinLen: 4096}
	b := in.Bytes()
	if len(b) != FstrimRangeSize {
		t.Fatalf("len = %d", len(b))
	}
	out, err := DecodeFstrimRange(b)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip = %+v, want %+v", out, in)
	}
}

func TestShortBuffersRefused(t *testing.T) {
	for n := 0; n < WriteStreamSize; n++ {
		if _, err := DecodeWriteStream(make([]byte, n)); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("DecodeWriteStream(%d bytes) err = %v, want ErrShortBuffer", n, err)
		}
		if err := (WriteStream{}).Encode(make([]byte, n)); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("Encode into %d bytes err = %v, want ErrShortBuffer", n, err)
		}
	}
	for n := 0; n < FstrimRangeSize; n++ {
		if _, err := DecodeFstrimRange(make([]byte, n)); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("DecodeFstrimRange(%d bytes) err = %v, want ErrShortBuffer", n, err)
		}
		if err := (FstrimRange{}).Encode(make([]byte, n)); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("FstrimRange.Encode into %d bytes err = %v, want ErrShortBuffer", n, err)
		}
	}
	if _, err := DecodeWriteStream(nil); err == nil {
		t.Error("DecodeWriteStream(nil) accepted")
	}
}

func TestOpName(t *testing.T) {
	for op, want := range map[uint32]string{OpGetMax: "GET_MAX", OpGet: "GET", OpSet: "SET", 6: "0x6"} {
		if got := OpName(op); got != want {
			t.Errorf("OpName(%d) = %q, want %q", op, got, want)
		}
	}
}

// A filesystem without write streams (the test's temp dir) answers the
// ioctl with ENOTTY; the client must hand that back as the raw errno with
// the operation named, and never report success.
func TestClientOnPlainFile(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "ws")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := f.Fd()

	_, err = GetMax(fd)
	checkClientErr(t, err, "ioctl(GET_MAX): ")
	_, err = Get(fd)
	checkClientErr(t, err, "ioctl(GET): ")
	checkClientErr(t, Set(fd, 1), "ioctl(SET): ")

	// A descriptor that is not open gives EBADF, proving the errno is
	// passed through. (A just-closed fd could be reused by the runtime.)
	_, err = Get(1<<31 - 1)
	if !errors.Is(err, unix.EBADF) {
		t.Errorf("Get on closed fd err = %v, want EBADF", err)
	}
}

func checkClientErr(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded on a filesystem without write streams", prefix)
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		t.Fatalf("%v does not wrap a unix.Errno", err)
	}
	// ENOTTY on filesystems that lack the ioctl; some (overlay over a
	// filesystem that rejects it differently) may say EINVAL or EOPNOTSUPP.
	if errno != unix.ENOTTY && errno != unix.EINVAL && errno != unix.EOPNOTSUPP {
		t.Errorf("errno = %v, want ENOTTY", errno)
	}
	if got := err.Error(); len(got) < len(prefix) || got[:len(prefix)] != prefix {
		t.Errorf("error %q lacks prefix %q", got, prefix)
	}
}

func TestShutdownNumber(t *testing.T) {
	if FS_IOC_SHUTDOWN != 0x8004587d || FS_IOC_SHUTDOWN != IOC(IOCRead, 'X', 125, 4) {
		t.Errorf("FS_IOC_SHUTDOWN = %#x, want 0x8004587d", FS_IOC_SHUTDOWN)
	}
}

package backend

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// testMakeWritable drives one device opened read-only through a remount
// read-write: reads keep working while it reopens, nobody else can claim
// the device before, during or after, writes then land and flush, and
// Close releases the claim.
func testMakeWritable(t *testing.T, path string, open func(ro bool) (Device, error)) {
	t.Helper()
	d, err := open(true)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	want := make([]byte, 8192)
	if err := d.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(make([]byte, 4096), 0, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write before MakeWritable: %v, want EROFS", err)
	}
	busy := func(when string) {
		t.Helper()
		for _, ro := range []bool{true, false} {
			if other, err := open(ro); !errors.Is(err, ErrBusy) {
				if err == nil {
					other.Close()
				}
				t.Errorf("%s: a second open (ro=%v): %v, want ErrBusy", when, ro, err)
			}
		}
	}
	busy("read-only")
	// Readers run through the reopen: none may fail.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var readErr atomic.Value
	var reads atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]byte, 8192)
			for !stop.Load() || reads.Load() < 20 {
				if err := d.ReadAt(got, 0); err != nil {
					readErr.Store(err)
					return
				}
				if !bytes.Equal(got[4096:], want[4096:]) {
					readErr.Store(errors.New("read back other bytes"))
					return
				}
				reads.Add(1)
			}
		}()
	}
	err = MakeWritable(d)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if e := readErr.Load(); e != nil {
		t.Fatalf("a read during the reopen: %v", e)
	}
	if err := MakeWritable(d); err != nil {
		t.Fatalf("MakeWritable of a writable device: %v", err)
	}
	busy("after the reopen")
	data := bytes.Repeat([]byte{0x5a}, 4096)
	if err := d.WriteAt(data, 0, 0); err != nil {
		t.Fatalf("write after MakeWritable: %v", err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if err := d.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	again, err := open(false)
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	defer again.Close()
	if err := again.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the write did not reach %s: %v", path, err)
	}
}

func TestFileMakeWritable(t *testing.T) {
	img := makeImage(t, 1<<20)
	testMakeWritable(t, img, func(ro bool) (Device, error) { return wrapOpen(OpenFile(img, ro)) })
}

func TestBlockMakeWritable(t *testing.T) {
	dev, _ := loopDevice(t, 16<<20, 4096)
	testMakeWritable(t, dev, func(ro bool) (Device, error) { return wrapOpen(OpenBlock(dev, ro)) })
}

// A read-only block device (blockdev --setro, a write-protected disk)
// would open read-write and fail every write: refused up front, and the
// device stays usable read-only.
func TestBlockMakeWritableWriteProtected(t *testing.T) {
	dev, _ := loopDevice(t, 16<<20, 512)
	if out, err := exec.Command("blockdev", "--setro", dev).CombinedOutput(); err != nil {
		t.Skipf("blockdev --setro: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("blockdev", "--setrw", dev).Run() })
	b, err := OpenBlock(dev, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.MakeWritable(); !errors.Is(err, ErrWriteProtected) || !errors.Is(err, syscall.EROFS) {
		t.Fatalf("MakeWritable of a read-only block device: %v, want ErrWriteProtected", err)
	}
	if err := b.ReadAt(make([]byte, 512), 0); err != nil {
		t.Fatalf("read after the refusal: %v", err)
	}
	if err := b.WriteAt(make([]byte, 512), 0, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write after the refusal: %v, want EROFS", err)
	}
}

// An image that cannot be opened for writing (immutable, or on a read-only
// filesystem) is refused the same way.
func TestFileMakeWritableImmutable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chattr +i needs root")
	}
	img := makeImage(t, 1<<20)
	if out, err := exec.Command("chattr", "+i", img).CombinedOutput(); err != nil {
		t.Skipf("chattr +i not available here (%v: %s)", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", img).Run() })
	f, err := OpenFile(img, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.MakeWritable(); !errors.Is(err, ErrWriteProtected) {
		t.Fatalf("MakeWritable of an immutable image: %v, want ErrWriteProtected", err)
	}
	if !f.ReadOnly() {
		t.Fatal("the image turned writable after a refused MakeWritable")
	}
}

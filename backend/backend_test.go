package backend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func makeImage(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dev.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestFileReadWrite(t *testing.T) {
	p := makeImage(t, 1<<20)
	d, err := OpenFile(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Size() != 1<<20 || d.SectorSize() != 512 || d.MaxStreams() != 0 || d.Kind() != "file" {
		t.Fatalf("geometry: size %d sector %d streams %d kind %q", d.Size(), d.SectorSize(), d.MaxStreams(), d.Kind())
	}
	data := pattern(1, 10000)
	if err := d.WriteAt(data, 12345, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := d.ReadAt(got, 12345); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs from written data")
	}
	onDisk, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk[12345:12345+len(data)], data) {
		t.Fatal("image file does not hold the written data")
	}

	// Out of range: past the end, negative, and straddling the end.
	for _, off := range []int64{1 << 20, -1, 1<<20 - 10} {
		if err := d.WriteAt(make([]byte, 100), off, 0); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("write at %d: got %v, want ErrOutOfRange", off, err)
		}
		if err := d.ReadAt(make([]byte, 100), off); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("read at %d: got %v, want ErrOutOfRange", off, err)
		}
	}
	if fi, _ := os.Stat(p); fi.Size() != 1<<20 {
		t.Fatalf("image grew to %d", fi.Size())
	}
}

func TestFileDiscard(t *testing.T) {
	p := makeImage(t, 1<<20)
	d, err := OpenFile(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	data := bytes.Repeat([]byte{0xAB}, 256<<10)
	if err := d.WriteAt(data, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Discard(64<<10, 128<<10); err != nil {
		t.Fatal(err)
	}
	if err := d.Discard(0, 2<<20); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("discard past end: got %v", err)
	}
	got := make([]byte, len(data))
	if err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:64<<10], data[:64<<10]) || !bytes.Equal(got[192<<10:], data[192<<10:]) {
		t.Fatal("discard changed data outside its range")
	}
	if punchHoleWorks(t, filepath.Dir(p)) && !bytes.Equal(got[64<<10:192<<10], make([]byte, 128<<10)) {
		t.Fatal("punched range does not read as zeros")
	}
}

// punchHoleWorks reports whether the file system under dir supports hole
// punching, in which case discarded ranges must read back as zeros.
func punchHoleWorks(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096) == nil
}

func TestFileShortRead(t *testing.T) {
	p := makeImage(t, 64<<10)
	d, err := OpenFile(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Someone shrinking the image behind our back must not turn into a
	// silently short read.
	if err := os.Truncate(p, 32<<10); err != nil {
		t.Fatal(err)
	}
	err = d.ReadAt(make([]byte, 4096), 30<<10)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestFileBusyAndReadOnly(t *testing.T) {
	p := makeImage(t, 1<<20)
	d, err := OpenFile(p, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(p, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("second open: got %v, want ErrBusy", err)
	}
	if _, err := OpenFile(p, true); !errors.Is(err, ErrBusy) {
		t.Fatalf("read-only open of a held device: got %v, want ErrBusy", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenFile(p, true)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	defer ro.Close()
	if err := ro.WriteAt([]byte{1}, 0, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write to read-only device: got %v, want EROFS", err)
	}
	if err := ro.ReadAt(make([]byte, 10), 0); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDispatch(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope")
	_, err := Open(missing, OpenOptions{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: got %v, want fs.ErrNotExist", err)
	}
	if want := "device " + missing + ": no such file or directory"; err.Error() != want {
		t.Fatalf("missing: message %q, want %q", err, want)
	}
	if _, err := Open(dir, OpenOptions{}); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("directory: got %v", err)
	}
	if _, err := Open("/dev/null", OpenOptions{}); err == nil || !strings.Contains(err.Error(), "character device") {
		t.Fatalf("/dev/null: got %v", err)
	}

	img := makeImage(t, 1<<20)
	d, err := Open(img, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != "file" {
		t.Fatalf("kind %q", d.Kind())
	}
	if _, err := Open(img, OpenOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Open: got %v, want ErrBusy", err)
	}
	d.Close()

	if _, err := Open(img, OpenOptions{Kind: "block"}); err == nil {
		t.Fatal("kind block on a regular file succeeded")
	}
	if _, err := Open(img, OpenOptions{Kind: "tape"}); err == nil {
		t.Fatal("unknown kind succeeded")
	}
	old := NVMeOpener
	defer func() { NVMeOpener = old }()
	NVMeOpener = nil
	if _, err := Open(img, OpenOptions{Kind: "nvme"}); err == nil || !strings.Contains(err.Error(), "nvme backend not available") {
		t.Fatalf("kind nvme without backend: got %v", err)
	}
	d, err = Open(img, OpenOptions{Kind: "file", ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt([]byte{1}, 0, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("read-only Open allowed a write: %v", err)
	}
	d.Close()
}

func TestParseMountinfo(t *testing.T) {
	line := `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/my\040disk rw,errors=continue`
	dev, src, ok := parseMountinfo(line)
	if !ok || dev != unix.Mkdev(98, 0) || src != "/dev/my disk" {
		t.Fatalf("got %v %q %v", dev, src, ok)
	}
	if _, _, ok := parseMountinfo("garbage"); ok {
		t.Fatal("garbage line parsed")
	}
	if _, _, ok := parseMountinfo("1 2 x:y / / rw - a b c d"); ok {
		t.Fatal("bad device number parsed")
	}
	if got := unescapeMount(`a\134b\04`); got != `a\b\04` {
		t.Fatalf("unescape: %q", got)
	}
}

func TestIsMountedImage(t *testing.T) {
	img := makeImage(t, 1<<20)
	m, err := IsMounted(img)
	if err != nil || m {
		t.Fatalf("fresh image: mounted=%v err=%v", m, err)
	}
	if _, err := IsMounted(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

// --- block devices through a loop device ---

// loopDevice attaches a fresh image of size bytes to a loop device with the
// given logical sector size and detaches it when the test ends.
func loopDevice(t *testing.T, size int64, sector int) (dev, img string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("block device tests need root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	img = makeImage(t, size)
	out, err := exec.Command("losetup", "-f", "--show", "--sector-size", strconv.Itoa(sector), img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	dev = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev, img
}

func TestBlock(t *testing.T) {
	for _, sector := range []int{512, 4096} {
		t.Run(fmt.Sprint(sector), func(t *testing.T) { testBlock(t, sector) })
	}
}

func testBlock(t *testing.T, sector int) {
	const size = 64 << 20
	dev, _ := loopDevice(t, size, sector)
	b, err := OpenBlock(dev, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Size() != size || b.SectorSize() != sector || b.Kind() != "block" || b.MaxStreams() != 0 {
		t.Fatalf("geometry: size %d sector %d kind %q", b.Size(), b.SectorSize(), b.Kind())
	}

	t.Run("busy", func(t *testing.T) {
		if _, err := OpenBlock(dev, false); !errors.Is(err, ErrBusy) {
			t.Fatalf("second open: got %v, want ErrBusy", err)
		}
		if _, err := OpenBlock(dev, true); !errors.Is(err, ErrBusy) {
			t.Fatalf("read-only second open: got %v, want ErrBusy", err)
		}
		if _, err := Open(dev, OpenOptions{}); !errors.Is(err, ErrBusy) {
			t.Fatalf("Open: got %v, want ErrBusy", err)
		}
	})

	// model mirrors the first region of the device.
	const region = 8 << 20
	model := make([]byte, region)
	check := func(t *testing.T) {
		t.Helper()
		got := AlignedBuf(region)
		if err := b.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(got, model); i >= 0 {
			t.Fatalf("device differs from model at byte %d: %#x, want %#x", i, got[i], model[i])
		}
	}

	t.Run("aligned", func(t *testing.T) {
		buf := AlignedBuf(256 << 10)
		copy(buf, pattern(2, len(buf)))
		off := int64(3 * sector)
		if err := b.WriteAt(buf, off, 1); err != nil {
			t.Fatal(err)
		}
		copy(model[off:], buf)
		check(t)
	})

	t.Run("unaligned", func(t *testing.T) {
		cases := []struct{ off, n, memShift int }{
			{1, 1, 0},                         // one byte in the first sector
			{sector - 1, 2, 0},                // straddles a sector boundary
			{7, sector, 0},                    // a sector's worth, misaligned
			{sector * 5, sector * 3, 1},       // aligned range, misaligned memory
			{777, 3<<20 + 123, 3},             // several bounce pieces
			{maxBounce - 5, 10, 0},            // straddles a bounce piece
			{2*sector + 100, sector - 200, 0}, // inside one sector
		}
		for i, c := range cases {
			buf := AlignedBuf(c.n + c.memShift + memAlign)[c.memShift+1 : c.memShift+1+c.n]
			copy(buf, pattern(uint64(10+i), c.n))
			if err := b.WriteAt(buf, int64(c.off), 0); err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			copy(model[c.off:], buf)
			got := AlignedBuf(c.n + 1)[1:]
			if err := b.ReadAt(got, int64(c.off)); err != nil {
				t.Fatalf("case %d read: %v", i, err)
			}
			if !bytes.Equal(got, buf) {
				t.Fatalf("case %d: read back differs", i)
			}
		}
		check(t)
	})

	t.Run("concurrent-same-sector", func(t *testing.T) {
		// Writers own disjoint byte ranges, several inside the same
		// sectors, one straddling a sector boundary; read-modify-write
		// without locking would lose some of their bytes.
		const writers, rounds = 8, 200
		base := int64(6 << 20)
		width := int64(sector / 4)
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range int64(writers) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off := base + w*width + 3
				buf := make([]byte, width-5)
				for r := range rounds {
					for i := range buf {
						buf[i] = byte(int(w)*31 + r)
					}
					if err := b.WriteAt(buf, off, 0); err != nil {
						errs <- err
						return
					}
				}
				copy(model[off:], buf)
			}()
		}
		// An aligned writer on the sector after them, which takes the
		// same stripe shared.
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := AlignedBuf(sector)
			off := base + 2*int64(sector)
			for r := range rounds {
				for i := range buf {
					buf[i] = byte(r)
				}
				if err := b.WriteAt(buf, off, 0); err != nil {
					errs <- err
					return
				}
			}
			copy(model[off:], buf)
		}()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		check(t)
	})

	t.Run("flush", func(t *testing.T) {
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("discard", func(t *testing.T) {
		off, n := int64(1<<20), int64(256<<10)
		data := bytes.Repeat([]byte{0x5A}, int(n+2*int64(sector)))
		if err := b.WriteAt(data, off-int64(sector), 0); err != nil {
			t.Fatal(err)
		}
		copy(model[off-int64(sector):], data)
		// Unaligned edges: only whole sectors inside the range go.
		if err := b.Discard(off-10, n+20); err != nil {
			t.Fatal(err)
		}
		if discardMax(t, dev) > 0 {
			clear(model[off : off+n])
		}
		check(t)
		if err := b.Discard(size-512, 1024); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("discard past end: %v", err)
		}
	})

	t.Run("range", func(t *testing.T) {
		if err := b.WriteAt(make([]byte, 1), size, 0); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("write past end: %v", err)
		}
		if err := b.ReadAt(make([]byte, 2), size-1); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("read past end: %v", err)
		}
		last := []byte("tail")
		if err := b.WriteAt(last, size-4, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4)
		if err := b.ReadAt(got, size-4); err != nil || !bytes.Equal(got, last) {
			t.Fatalf("tail read %q %v", got, err)
		}
	})
}

func discardMax(t *testing.T, dev string) int64 {
	raw, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue/discard_max_bytes"))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	return v
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestBlockReadOnlyAndOpen(t *testing.T) {
	dev, img := loopDevice(t, 8<<20, 512)
	d, err := Open(dev, OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != "block" {
		t.Fatalf("kind %q", d.Kind())
	}
	if err := d.WriteAt(make([]byte, 512), 0, 0); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("read-only write: %v", err)
	}
	if err := d.ReadAt(make([]byte, 100), 3); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := Open(dev, OpenOptions{Kind: "file"}); err == nil {
		t.Fatal("kind file on a block device succeeded")
	}
	m, err := IsMounted(dev)
	if err != nil || m {
		t.Fatalf("unmounted loop: mounted=%v err=%v", m, err)
	}
	m, err = IsMounted(img)
	if err != nil || m {
		t.Fatalf("unmounted image: mounted=%v err=%v", m, err)
	}
}

// TestOpenNVMeFallback names a node like an NVMe namespace so Open consults
// the hook, and checks it falls back to the block backend when the hook
// fails.
func TestOpenNVMeFallback(t *testing.T) {
	dev, _ := loopDevice(t, 8<<20, 512)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(t.TempDir(), "nvme7n1")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Skipf("mknod: %v", err)
	}
	old := NVMeOpener
	defer func() { NVMeOpener = old }()
	var calls []string
	NVMeOpener = func(path string, ro bool) (Device, error) {
		calls = append(calls, path)
		return nil, errors.New("not FDP capable")
	}
	d, err := Open(node, OpenOptions{})
	if err != nil {
		// A nodev temp file system refuses device nodes.
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			t.Skipf("device nodes unusable here: %v", err)
		}
		t.Fatal(err)
	}
	defer d.Close()
	if d.Kind() != "block" || len(calls) != 1 || calls[0] != node {
		t.Fatalf("kind %q, hook calls %v", d.Kind(), calls)
	}
	if _, err := Open(node, OpenOptions{Kind: "nvme"}); err == nil {
		t.Fatal("forced nvme with a failing hook succeeded")
	}
	// A block device not named like a namespace never reaches the hook.
	calls = nil
	if _, err := Open(dev, OpenOptions{}); !errors.Is(err, ErrBusy) || len(calls) != 0 {
		t.Fatalf("plain block: err %v, hook calls %v", err, calls)
	}
}

func TestIsMountedExt4(t *testing.T) {
	dev, img := loopDevice(t, 32<<20, 512)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 not installed")
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount not permitted here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	for _, p := range []string{dev, img} {
		m, err := IsMounted(p)
		if err != nil || !m {
			t.Errorf("%s: mounted=%v err=%v, want mounted", p, m, err)
		}
	}
	if _, err := OpenBlock(dev, false); !errors.Is(err, ErrBusy) {
		t.Errorf("open of a mounted device: got %v, want ErrBusy", err)
	}
}

// TestOpenZNSFirst: a namespace goes to ZNSOpener first; a zoned one is
// never handed to the FDP backend nor falls back to the block backend,
// even when it fails to open; one that is not zoned goes on as before.
func TestOpenZNSFirst(t *testing.T) {
	dev, img := loopDevice(t, 8<<20, 512)
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blk, chr := filepath.Join(dir, "nvme7n1"), filepath.Join(dir, "ng7n1")
	if err := unix.Mknod(blk, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Skipf("mknod: %v", err)
	}
	if err := unix.Mknod(chr, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Skipf("mknod: %v", err)
	}
	oldN, oldZ := NVMeOpener, ZNSOpener
	defer func() { NVMeOpener, ZNSOpener = oldN, oldZ }()
	var calls []string
	NVMeOpener = func(path string, ro bool) (Device, error) {
		calls = append(calls, "nvme")
		return nil, errors.New("not FDP capable")
	}
	// The zoned device the hook hands out: any Device does here.
	other := filepath.Join(dir, "other.img")
	if err := os.WriteFile(other, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	zoned, zerr := false, error(nil)
	ZNSOpener = func(path string, ro bool) (Device, bool, error) {
		calls = append(calls, "zns")
		if !zoned || zerr != nil {
			return nil, zoned, zerr
		}
		d, err := OpenFile(other, ro)
		return d, true, err
	}
	open := func(path, kind string) (Device, error) {
		calls = nil
		d, err := Open(path, OpenOptions{Kind: kind})
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			t.Skipf("device nodes unusable here: %v", err) // a nodev temp file system
		}
		return d, err
	}

	zoned = true
	for _, p := range []string{blk, chr} {
		d, err := open(p, "")
		if err != nil || d.Kind() != "file" || fmt.Sprint(calls) != "[zns]" {
			t.Fatalf("%s, zoned: %v, kind %v, calls %v", p, err, d, calls)
		}
		d.Close()
	}
	zerr = errors.New("zoned, unusable format")
	if _, err := open(blk, ""); !errors.Is(err, zerr) || fmt.Sprint(calls) != "[zns]" {
		t.Fatalf("zoned namespace that fails: %v, calls %v (must not fall back)", err, calls)
	}

	zoned, zerr = false, nil
	d, err := open(blk, "")
	if err != nil || d.Kind() != "block" || fmt.Sprint(calls) != "[zns nvme]" {
		t.Fatalf("not zoned: %v, calls %v", err, calls)
	}
	d.Close()
	if _, err := open(blk, "zns"); err == nil || !strings.Contains(err.Error(), "not a zoned namespace") {
		t.Fatalf("kind zns on a namespace that is not zoned: %v", err)
	}
	if _, err := open(img, "zns"); err == nil || fmt.Sprint(calls) != "[zns]" {
		t.Fatalf("kind zns on an image: %v, calls %v", err, calls)
	}
}

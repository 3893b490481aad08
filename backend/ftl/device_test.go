package ftl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend"
)

func newImage(t *testing.T, size int64, spec string) (string, Label) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	g, err := ParseGeometry(spec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Format(path, g)
	if err != nil {
		t.Fatal(err)
	}
	return path, l
}

func openDev(t *testing.T, path string) (*Device, []string) {
	t.Helper()
	var warns []string
	d, err := backend.Open(path, backend.OpenOptions{Warn: func(s string) { warns = append(warns, s) }})
	if err != nil {
		t.Fatal(err)
	}
	fd, ok := d.(*Device)
	if !ok {
		t.Fatalf("opened as %s, want ftl", d.Kind())
	}
	return fd, warns
}

func TestFormatOpenPersist(t *testing.T) {
	path, l := newImage(t, 96<<20, "op=14,ru=256K,handles=4")
	if l.Logical >= 96<<20 || l.Logical < 90<<20 || l.Physical <= l.Logical {
		t.Fatalf("label %+v", l)
	}
	d, warns := openDev(t, path)
	if len(warns) != 0 {
		t.Fatalf("warnings on a fresh image: %v", warns)
	}
	if d.Size() != l.Logical || d.MaxStreams() != 4 || d.Kind() != "ftl" {
		t.Fatalf("size %d streams %d kind %s", d.Size(), d.MaxStreams(), d.Kind())
	}
	buf := bytes.Repeat([]byte{7}, 1<<20)
	for off := int64(0); off+int64(len(buf)) <= d.Size(); off += int64(len(buf)) {
		if err := d.WriteAt(buf, off, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.WriteAt(buf, 0, 3); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(buf[:1], d.Size(), 0); !errors.Is(err, backend.ErrOutOfRange) {
		t.Fatalf("write past the logical end: %v", err)
	}
	before, err := d.FDPStats()
	if err != nil {
		t.Fatal(err)
	}
	if before.Handles[2].HostBytes == 0 || before.Handles[0].HostBytes != 0 {
		t.Fatalf("stream 3 did not reach handle 3: %+v", before.Handles)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, warns = openDev(t, path)
	defer d.Close()
	if len(warns) != 0 {
		t.Fatalf("warnings: %v", warns)
	}
	after, _ := d.FDPStats()
	if after.HostBytesWritten != before.HostBytesWritten || after.MediaBytesWritten != before.MediaBytesWritten {
		t.Fatalf("counters after remount %+v, before %+v", after, before)
	}
	checkInvariants(t, d.m)
	got := make([]byte, 1<<20)
	if err := d.ReadAt(got, 0); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("data after remount: %v", err)
	}
}

// A torn or damaged save falls back to the other slot; with both gone the
// model restarts empty and the device still opens.
func TestDamagedStateFallsBack(t *testing.T) {
	path, l := newImage(t, 64<<20, "op=14,ru=256K,handles=2")
	d, _ := openDev(t, path)
	if err := d.WriteAt(make([]byte, 4<<20), 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(); err != nil { // seq 2, slot 0
		t.Fatal(err)
	}
	if err := d.WriteAt(make([]byte, 4<<20), 4<<20, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil { // seq 3, slot 1
		t.Fatal(err)
	}
	smash := func(slot int, at int64) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{0xff, 0xee}, l.Logical+int64(slot)*l.SlotSize+at); err != nil {
			t.Fatal(err)
		}
	}
	smash(1, slotHeader+100) // newest payload torn
	d, warns := openDev(t, path)
	c := d.m.Counters()
	d.f.Close() // no save: keep the damage for the next step
	if len(warns) != 0 || c.Host != 4<<20 {
		t.Fatalf("after a torn newest slot: host %d warnings %v, want the older 4 MiB", c.Host, warns)
	}
	smash(0, 20) // older header too
	d, warns = openDev(t, path)
	defer d.Close()
	if len(warns) != 1 || !strings.Contains(warns[0], "restarts empty") {
		t.Fatalf("warnings %v", warns)
	}
	if c := d.m.Counters(); c.Host != 0 {
		t.Fatalf("fresh model counts %d", c.Host)
	}
	if err := d.WriteAt(make([]byte, 4096), 0, 0); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRejectsBadState(t *testing.T) {
	m := mustModel(t, "op=14,ru=64K,handles=2", 8<<20)
	fill(t, m, 1)
	fill(t, m, 0)
	good := m.encode()
	if _, err := decode(m.g, m.LogicalBytes(), good); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the dimensions, writers, units and map (not the
	// counters, which decode cannot check):
	// decode either refuses or yields a model whose invariants hold.
	for _, i := range []int{0, 4, 12, 16, 92, 96, 100, 116, 117, 119, 125, len(good) - 5*int(m.l.lpages), len(good) - 1} {
		b := append([]byte(nil), good...)
		b[i] ^= 0xa5
		if m2, err := decode(m.g, m.LogicalBytes(), b); err == nil {
			checkInvariants(t, m2)
		} else if !errors.Is(err, ErrState) {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if _, err := decode(m.g, m.LogicalBytes(), good[:len(good)-1]); !errors.Is(err, ErrState) {
		t.Fatalf("short state: %v", err)
	}
}

func TestPlainImageNotModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := backend.Open(path, backend.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Kind() != "file" {
		t.Fatalf("plain image opened as %s", d.Kind())
	}
	if _, err := backend.Open(path, backend.OpenOptions{Kind: "ftl"}); err == nil {
		t.Fatal("kind ftl opened an image without a model")
	}
}

func TestFormatTooSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	os.WriteFile(path, nil, 0o644)
	os.Truncate(path, 64<<20)
	g, _ := ParseGeometry("op=7,ru=8M,handles=8")
	_, err := Format(path, g)
	if !errors.Is(err, ErrGeometry) {
		t.Fatalf("err %v", err)
	}
	if _, ok, _ := ReadLabel(path); ok {
		t.Fatal("failed format left a label")
	}
}

// saveDue makes the next Flush ask for a state save.
func saveDue(d *Device) { d.lastSave.Store(time.Now().Add(-2 * saveEvery).UnixNano()) }

// A failed state save is the model's problem, never the filesystem's:
// Flush (a journal commit) still succeeds, the model keeps counting, and
// FDPStats and the log say what happened until a later save succeeds.
func TestSaveFailureNeverFailsFlush(t *testing.T) {
	path, _ := newImage(t, 64<<20, "op=14,ru=256K,handles=2")
	d, _ := openDev(t, path)
	var warns []string
	var wmu sync.Mutex
	d.warn = func(s string) { wmu.Lock(); warns = append(warns, s); wmu.Unlock() }
	called := make(chan struct{}, 4)
	d.writeState = func([]byte, int64) error { called <- struct{}{}; return syscall.EIO }
	if err := d.WriteAt(make([]byte, 1<<20), 0, 1); err != nil {
		t.Fatal(err)
	}
	saveDue(d)
	if err := d.Flush(); err != nil {
		t.Fatalf("Flush returned the model's save error: %v", err)
	}
	<-called
	d.saveMu.Lock() // the save records its outcome before it lets go
	d.saveMu.Unlock()
	st, err := d.FDPStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.ModelSaveFailures != 1 || !strings.Contains(st.ModelError, "save ftl state") || !strings.Contains(st.ModelError, "input/output error") {
		t.Fatalf("after a failed save: failures %d, model error %q", st.ModelSaveFailures, st.ModelError)
	}
	wmu.Lock()
	if len(warns) != 1 || !strings.Contains(warns[0], "save ftl state") {
		t.Fatalf("log after a failed save: %q", warns)
	}
	wmu.Unlock()
	if err := d.WriteAt(make([]byte, 1<<20), 1<<20, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.FDPStats(); st.HostBytesWritten != 2<<20 {
		t.Fatalf("model stopped counting after a failed save: host %d", st.HostBytesWritten)
	}
	d.writeState = d.writeSlot
	if err := d.Save(); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.FDPStats(); st.ModelError != "" || st.ModelSaves != 1 || st.ModelSaveFailures != 1 {
		t.Fatalf("after a good save: %q, saves %d failures %d", st.ModelError, st.ModelSaves, st.ModelSaveFailures)
	}
	d.writeState = func([]byte, int64) error { return syscall.EIO }
	if err := d.Close(); err == nil {
		t.Fatal("Close hid a failed final save")
	}
}

// The state save runs beside Flush, not inside it: a journal commit waits
// for Flush, and a save of a large drive writes megabytes.
func TestFlushDoesNotWaitForSave(t *testing.T) {
	path, _ := newImage(t, 64<<20, "op=14,ru=256K,handles=2")
	d, _ := openDev(t, path)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d.writeState = func(b []byte, off int64) error {
		once.Do(func() { close(started) })
		<-release
		return d.writeSlot(b, off)
	}
	saveDue(d)
	flushed := make(chan error, 1)
	go func() { flushed <- d.Flush() }()
	<-started // the save was asked for and is now held
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a hang detector, not a latency bound
		t.Fatal("Flush waited for the model's state save")
	}
	close(release)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, warns := openDev(t, path); len(warns) != 0 {
		t.Fatalf("state after a background save and close: %v", warns)
	}
}

// A model that stops counting says so once in the log and in FDPStats;
// writes still reach the image and succeed.
func TestModelStopReported(t *testing.T) {
	path, _ := newImage(t, 64<<20, "op=14,ru=256K,handles=2")
	d, _ := openDev(t, path)
	defer d.Close()
	var warns []string
	d.warn = func(s string) { warns = append(warns, s) }
	d.m.mu.Lock()
	d.m.err = errStuck
	d.m.mu.Unlock()
	for range 2 {
		if err := d.WriteAt([]byte{1}, 0, 1); err != nil {
			t.Fatalf("write with a stopped model: %v", err)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "stopped counting") {
		t.Fatalf("log: %q", warns)
	}
	st, err := d.FDPStats()
	if err != nil || !strings.Contains(st.ModelError, "stopped counting") {
		t.Fatalf("stats: %q, %v", st.ModelError, err)
	}
}

// A label written before the GC timing keys existed keeps the timing the
// drive was formatted with: on-demand GC, units opened lazily.
func TestLegacyLabelKeepsTiming(t *testing.T) {
	path, l := newImage(t, 64<<20, "op=14,ru=256K,handles=2")
	b := l.encode()
	spec := "op=14,ru=256K,handles=2,gc=cb,isolation=initial"
	clear(b[32 : labelSize-4])
	binary.LittleEndian.PutUint16(b[32:], uint16(len(spec)))
	copy(b[34:], spec)
	binary.LittleEndian.PutUint32(b[labelSize-4:], crc32.Checksum(b[:labelSize-4], castagnoli))
	st, _ := os.Stat(path)
	got, err := decodeLabel(b, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if g := got.Geometry; g.BG != 0 || g.FG != 0 || g.Preopen || g.GC != "cost-benefit" {
		t.Fatalf("legacy label read as %+v", g)
	}
}

// A modelled image opened read-only turns read-write in place: the writes
// after it are counted and the counts saved at Close, as for an image
// opened read-write.
func TestMakeWritable(t *testing.T) {
	path, _ := newImage(t, 64<<20, "op=14,ru=256K,handles=4")
	d, ok, err := Open(path, true, nil)
	if err != nil || !ok {
		t.Fatalf("open read-only: %v %v", ok, err)
	}
	buf := bytes.Repeat([]byte{9}, 1<<20)
	if err := d.WriteAt(buf, 0, 2); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write while read-only: %v, want EROFS", err)
	}
	if _, err := backend.Open(path, backend.OpenOptions{ReadOnly: true}); !errors.Is(err, backend.ErrBusy) {
		t.Fatalf("second open while held: %v, want ErrBusy", err)
	}
	if err := backend.MakeWritable(d); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt(buf, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	st, _ := d.FDPStats()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Handles[1].HostBytes != 1<<20 {
		t.Fatalf("handle 2 counted %d bytes, want 1 MiB", st.Handles[1].HostBytes)
	}
	d2, _ := openDev(t, path)
	defer d2.Close()
	if after, _ := d2.FDPStats(); after.HostBytesWritten != st.HostBytesWritten {
		t.Fatalf("counts saved at Close: %d host bytes, want %d", after.HostBytesWritten, st.HostBytesWritten)
	}
}

package integration

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests feed the real binary bad input: damaged, truncated, foreign
// and newer-format images, a locked device, missing paths, bad mount
// points, a dead mount and bad command lines. Every one must end in a clear
// error (one line on stderr, a non-zero exit) or, where the filesystem can
// cope, in a working mount, and never in a panic.

// runStreamfs runs the streamfs binary and returns stdout, stderr and the
// exit status (-1 when it did not exit normally).
func runStreamfs(args ...string) (stdout, stderr string, code int) {
	stdout, stderr, err := tryCmdSplit(streamfsBin, args...)
	return stdout, stderr, exitCode(err)
}

// nonEmptyLines returns the lines of s that are not blank.
func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// checkNoPanic fails the test when output shows a Go panic or a goroutine
// dump.
func checkNoPanic(t *testing.T, what, output string) {
	t.Helper()
	if strings.Contains(output, "panic") || strings.Contains(output, "goroutine ") {
		t.Errorf("%s: the binary panicked:\n%s", what, output)
	}
}

// checkClearError checks a command that must fail: a non-zero exit (exactly
// wantCode when it is positive), no panic, and exactly one line on stderr
// that contains every one of wants (case-insensitive).
func checkClearError(t *testing.T, what, stderr string, code, wantCode int, wants ...string) {
	t.Helper()
	checkNoPanic(t, what, stderr)
	switch {
	case code == 0:
		t.Errorf("%s: succeeded, want a failure; stderr:\n%s", what, stderr)
	case code < 0:
		t.Errorf("%s: did not exit normally (killed?); stderr:\n%s", what, stderr)
	case wantCode > 0 && code != wantCode:
		t.Errorf("%s: exit status %d, want %d; stderr:\n%s", what, code, wantCode, stderr)
	}
	lines := nonEmptyLines(stderr)
	if len(lines) != 1 {
		t.Errorf("%s: %d lines on stderr, want one error line:\n%s", what, len(lines), stderr)
	}
	if len(lines) == 0 {
		return
	}
	last := strings.ToLower(lines[len(lines)-1])
	for _, w := range wants {
		if !strings.Contains(last, strings.ToLower(w)) {
			t.Errorf("%s: the error line does not mention %q:\n%s", what, w, stderr)
		}
	}
}

// emptyDir makes a fresh empty directory to mount on.
func emptyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mountMustFail runs a foreground `streamfs mount` that must fail with a
// clear error, and makes sure it left nothing mounted.
func mountMustFail(t *testing.T, what, img, dir string, opts []string, wants ...string) {
	t.Helper()
	args := []string{"mount"}
	if len(opts) > 0 {
		args = append(args, "-o", strings.Join(opts, ","))
	}
	_, stderr, code := runStreamfs(append(args, img, dir)...)
	checkClearError(t, what, stderr, code, 0, wants...)
	if isMounted(dir) {
		t.Errorf("%s: the failed mount left %s mounted", what, dir)
		_, _ = tryCmd("umount", "-l", dir)
	}
}

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// superOffsets returns the byte offsets of the primary and backup
// superblocks, read from the primary.
func superOffsets(t *testing.T, img string) []int64 {
	t.Helper()
	b := readAt(t, img, 0, 512)
	bs := binary.LittleEndian.Uint32(b[24:])
	backup := binary.LittleEndian.Uint64(b[80:])
	return []int64{0, int64(backup) * int64(bs)}
}

// readAt reads n bytes of a file at off.
func readAt(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("reading %d bytes of %s at %d: %v", n, path, off, err)
	}
	return b
}

// writeAt overwrites part of a file.
func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// patchSuper applies patch to both superblock copies of an unmounted image
// and recomputes their crc32c, so the copies are valid but say something
// else.
func patchSuper(t *testing.T, img string, patch func(sb []byte)) {
	t.Helper()
	for _, off := range superOffsets(t, img) {
		b := readAt(t, img, off, 512)
		if !bytes.Equal(b[:8], []byte("STRMFS\x00\x01")) {
			t.Fatalf("%s: no superblock at %d", img, off)
		}
		patch(b)
		binary.LittleEndian.PutUint32(b[508:], crc32.Checksum(b[:508], castagnoliTable))
		writeAt(t, img, off, b)
	}
}

// primarySuperValid reports whether block 0 holds a superblock with the
// right magic and checksum.
func primarySuperValid(t *testing.T, img string) bool {
	t.Helper()
	b := readAt(t, img, 0, 512)
	return bytes.Equal(b[:8], []byte("STRMFS\x00\x01")) &&
		binary.LittleEndian.Uint32(b[508:]) == crc32.Checksum(b[:508], castagnoliTable)
}

// imageInfo is the part of `streamfs info --json` these tests use.
type imageInfo struct {
	BlockSize     int64  `json:"block_size"`
	JournalStart  int64  `json:"journal_start"`
	JournalBlocks int64  `json:"journal_blocks"`
	Compat        uint32 `json:"features_compat"`
	ROCompat      uint32 `json:"features_ro_compat"`
	Incompat      uint32 `json:"features_incompat"`
}

func readImageInfo(t *testing.T, img string) imageInfo {
	t.Helper()
	out, stderr, code := runStreamfs("info", "--json", img)
	if code != 0 {
		t.Fatalf("streamfs info --json %s: exit %d: %s", img, code, stderr)
	}
	var info imageInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("streamfs info --json %s: %v\n%s", img, err, out)
	}
	return info
}

// fsckStatus runs streamfs fsck and checks it did not panic.
func fsckStatus(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code = runStreamfs(append([]string{"fsck"}, args...)...)
	checkNoPanic(t, "fsck "+strings.Join(args, " "), stdout+stderr)
	return stdout, stderr, code
}

// copyImage copies an image (sparse) into a fresh temporary directory.
func copyImage(t *testing.T, img string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(img))
	runCmd(t, "cp", "--sparse=always", img, dst)
	return dst
}

// TestBadInputCorruptPrimarySuper destroys the primary superblock: the
// mount comes up from the backup copy and says so, fsck -n reports it
// (exit 4), fsck -y rewrites it (exit 1), and afterwards everything is
// clean again.
func TestBadInputCorruptPrimarySuper(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	data := randBytes(11, 1<<20+123)
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("d", "f"), data, 0o644)
	m.unmount(t)

	writeAt(t, img, 0, randBytes(12, 64<<10))
	if primarySuperValid(t, img) {
		t.Fatal("the random bytes left a valid primary superblock")
	}

	m = mountAt(t, img, m.dir)
	if log := m.log.String(); !strings.Contains(log, "backup") {
		t.Errorf("mount from the backup superblock did not say so:\n%s", log)
	}
	checkContent(t, m.path("d", "f"), data)
	m.unmount(t)

	// info shows the backup copy and warns about the primary.
	if _, stderr, code := runStreamfs("info", img); code != 0 || !strings.Contains(stderr, "backup") {
		t.Errorf("streamfs info with a corrupt primary: exit %d, want 0 and a warning naming the backup:\n%s", code, stderr)
	}

	out, stderr, code := fsckStatus(t, "-n", img)
	if code != 4 || !strings.Contains(out, "primary superblock") {
		t.Errorf("fsck -n with a corrupt primary superblock: exit %d, want 4 and a report of it:\n%s%s", code, out, stderr)
	}
	if primarySuperValid(t, img) {
		t.Errorf("fsck -n rewrote the primary superblock")
	}
	out, stderr, code = fsckStatus(t, "-y", img)
	if code != 1 || !strings.Contains(out, "primary superblock") {
		t.Errorf("fsck -y with a corrupt primary superblock: exit %d, want 1 and a report of the repair:\n%s%s", code, out, stderr)
	}
	if !primarySuperValid(t, img) {
		t.Errorf("fsck -y did not rewrite the primary superblock")
	}
	out, stderr, code = fsckStatus(t, "-n", img)
	if code != 0 {
		t.Errorf("fsck -n after fsck -y: exit %d, want 0:\n%s%s", code, out, stderr)
	}
	if _, stderr, code := runStreamfs("info", img); code != 0 || strings.Contains(stderr, "backup") {
		t.Errorf("streamfs info after the repair: exit %d, want 0 and no backup warning:\n%s", code, stderr)
	}

	m = mountAt(t, img, m.dir)
	if log := m.log.String(); strings.Contains(log, "backup") {
		t.Errorf("mount after fsck -y still used the backup superblock:\n%s", log)
	}
	checkContent(t, m.path("d", "f"), data)
	m.unmount(t)
}

// journalCommit is a commit header found in the journal region.
type journalCommit struct {
	off    int64 // byte offset of the header in the image
	seq    uint64
	blocks uint32
}

// findCommits scans the journal region of img for commit headers with a
// valid header checksum, in the order they lie on the device.
func findCommits(t *testing.T, img string, info imageInfo) []journalCommit {
	t.Helper()
	start := info.JournalStart * info.BlockSize
	region := readAt(t, img, start, int(info.JournalBlocks*info.BlockSize))
	var out []journalCommit
	for off := int64(0); off+info.BlockSize <= int64(len(region)); off += info.BlockSize {
		h := region[off : off+48]
		if !bytes.Equal(h[:8], []byte("STRMJRNL")) ||
			binary.LittleEndian.Uint32(h[44:]) != crc32.Checksum(h[:44], castagnoliTable) {
			continue
		}
		out = append(out, journalCommit{
			off:    start + off,
			seq:    binary.LittleEndian.Uint64(h[8:]),
			blocks: binary.LittleEndian.Uint32(h[16:]),
		})
	}
	return out
}

// TestBadInputCorruptJournal crashes a mount with fsynced files in the
// journal, then damages the journal in several ways. fsck -n must answer
// 0 or 4, and the mount must either come up (replay stops at the bad
// commit) or fail with a clear error; nothing may panic.
func TestBadInputCorruptJournal(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img, "commit=3600")
	const nfiles = 6
	contents := make([][]byte, nfiles)
	for i := range contents {
		contents[i] = randBytes(int64(100+i), 64<<10+i*4096+7)
		writeFile(t, m.path(fmt.Sprintf("f%d", i)), contents[i], 0o644)
	}
	m.kill(t) // SIGKILL: the files live only in the journal

	info := readImageInfo(t, img)
	commits := findCommits(t, img, info)
	if len(commits) < 2 {
		t.Fatalf("found %d journal commits after %d fsyncs, want at least 2", len(commits), nfiles)
	}
	newest := commits[0]
	for _, c := range commits {
		if c.seq > newest.seq {
			newest = c
		}
	}
	byOrder := append([]journalCommit(nil), commits...)
	sort.Slice(byOrder, func(i, j int) bool { return byOrder[i].seq < byOrder[j].seq })
	t.Logf("journal: %d commits, newest seq %d at byte %d (%d blocks)", len(commits), newest.seq, newest.off, newest.blocks)

	// The undamaged crash image replays everything.
	if out, stderr, code := fsckStatus(t, "-n", copyImage(t, img)); code != 0 {
		t.Errorf("fsck -n of the undamaged crash image: exit %d, want 0:\n%s%s", code, out, stderr)
	}

	jstart := info.JournalStart * info.BlockSize
	jlen := info.JournalBlocks * info.BlockSize
	cases := []struct {
		name   string
		damage func(t *testing.T, img string)
		// intact is how many of the first files must survive.
		intact int
	}{
		{"newest commit payload", func(t *testing.T, img string) {
			off := newest.off + info.BlockSize + 100
			if newest.blocks < 2 {
				off = newest.off + 60 // no payload block: hit the header's tail
			}
			b := readAt(t, img, off, 16)
			for i := range b {
				b[i] ^= 0xff
			}
			writeAt(t, img, off, b)
		}, nfiles / 2},
		{"newest commit header", func(t *testing.T, img string) {
			b := readAt(t, img, newest.off+8, 8)
			b[0] ^= 0x01 // the sequence number
			writeAt(t, img, newest.off+8, b)
		}, nfiles / 2},
		{"a middle commit payload", func(t *testing.T, img string) {
			mid := byOrder[len(byOrder)/2]
			if mid.blocks < 2 {
				t.Skipf("commit %d has no payload block", mid.seq)
			}
			off := mid.off + info.BlockSize + 8
			b := readAt(t, img, off, 1)
			b[0] ^= 0x80
			writeAt(t, img, off, b)
		}, len(byOrder)/2 - 1},
		{"garbage records with valid checksums", func(t *testing.T, img string) {
			// The oldest commit's payload replaced by random bytes whose
			// checksums verify: replay must reject the records, not
			// trust them.
			c := byOrder[0]
			if c.blocks < 2 {
				t.Skipf("commit %d has no payload block", c.seq)
			}
			h := readAt(t, img, c.off, 48)
			n := int(binary.LittleEndian.Uint32(h[20:]))
			payload := randBytes(14, n)
			writeAt(t, img, c.off+info.BlockSize, payload)
			binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(payload, castagnoliTable))
			binary.LittleEndian.PutUint32(h[44:], crc32.Checksum(h[:44], castagnoliTable))
			writeAt(t, img, c.off, h)
		}, 0},
		{"every commit header", func(t *testing.T, img string) {
			for _, c := range commits {
				b := readAt(t, img, c.off+20, 4)
				b[1] ^= 0x5a // the payload length
				writeAt(t, img, c.off+20, b)
			}
		}, 0},
		{"every commit header, checksums fixed", func(t *testing.T, img string) {
			// A header that verifies but lies: a huge block count and
			// payload length.
			for _, c := range commits {
				h := readAt(t, img, c.off, 48)
				binary.LittleEndian.PutUint32(h[16:], 0xfffffff0)
				binary.LittleEndian.PutUint32(h[20:], 0xfffffff0)
				binary.LittleEndian.PutUint32(h[44:], crc32.Checksum(h[:44], castagnoliTable))
				writeAt(t, img, c.off, h)
			}
		}, 0},
		{"random journal", func(t *testing.T, img string) {
			writeAt(t, img, jstart, randBytes(13, int(jlen)))
		}, 0},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			bad := copyImage(t, img)
			c.damage(t, bad)
			out, stderr, code := fsckStatus(t, "-n", bad)
			if code != 0 && code != 4 {
				t.Errorf("fsck -n: exit %d, want 0 or 4:\n%s%s", code, out, stderr)
			}
			t.Logf("fsck -n: exit %d\n%s%s", code, out, stderr)
			for _, opts := range [][]string{{"ro"}, nil} {
				m, log := tryMount(t, bad, emptyDir(t), opts...)
				if m == nil {
					// Refused: one clear error line last, after any log.
					lines := nonEmptyLines(log)
					if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], "streamfs mount: ") {
						t.Errorf("mount %v refused the damaged journal without a clear error:\n%s", opts, log)
					}
					t.Logf("mount %v refused: %s", opts, log)
					continue
				}
				for i := 0; i < c.intact; i++ {
					checkContent(t, m.path(fmt.Sprintf("f%d", i)), contents[i])
				}
				// Whatever survived reads without errors.
				treeHashes(t, m.dir)
				m.unmount(t)
			}
			// After the read-write mount (which writes a checkpoint) or
			// the refusal, fsck still answers without panicking.
			out, stderr, code = fsckStatus(t, "-n", bad)
			if code != 0 && code != 4 {
				t.Errorf("fsck -n after mounting: exit %d, want 0 or 4:\n%s%s", code, out, stderr)
			}
			if code == 4 {
				// What fsck finds, fsck -y repairs: then it checks clean
				// and mounts read-write.
				if out, stderr, code := fsckStatus(t, "-y", bad); code != 1 {
					t.Fatalf("fsck -y: exit %d, want 1:\n%s%s", code, out, stderr)
				}
				if out, stderr, code := fsckStatus(t, "-n", bad); code != 0 {
					t.Fatalf("fsck -n after fsck -y: exit %d, want 0:\n%s%s", code, out, stderr)
				}
				m, log := tryMount(t, bad, emptyDir(t))
				if m == nil {
					t.Fatalf("mount after fsck -y refused:\n%s", log)
				}
				treeHashes(t, m.dir)
				m.unmount(t)
			}
		})
	}
}

// tryMount starts a foreground `streamfs mount` and waits until it serves
// the mount (returning the mount, unmounted by a cleanup) or exits
// (returning nil and its output). A panic fails the test either way.
func tryMount(t *testing.T, img, dir string, opts ...string) (*mount, string) {
	t.Helper()
	m := startMount(t, img, dir, opts)
	deadline := time.Now().Add(hangGuard)
	for !isMounted(dir) {
		select {
		case <-m.exited:
			log := m.log.String()
			checkNoPanic(t, "mount "+img, log)
			if m.waitErr == nil {
				t.Errorf("streamfs mount %s exited 0 without mounting:\n%s", img, log)
			}
			return nil, log
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = m.cmd.Process.Kill()
			<-m.exited
			t.Fatalf("streamfs mount %s %s: neither mounted nor exited after %v\n%s", img, dir, hangGuard, m.log.String())
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("streamfs mount %s log:\n%s", dir, m.log.String())
		}
		m.stop(t)
		checkNoPanic(t, "mount "+img, m.log.String())
	})
	return m, ""
}

// TestBadInputTruncated cuts an image to half its size: the superblocks
// no longer match the device, and every command says so.
func TestBadInputTruncated(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), randBytes(21, 1<<20), 0o644)
	m.unmount(t)
	if err := os.Truncate(img, 128<<20); err != nil {
		t.Fatal(err)
	}
	dir := emptyDir(t)
	mountMustFail(t, "mount of a truncated image", img, dir, nil, img, "truncated")
	mountMustFail(t, "read-only mount of a truncated image", img, dir, []string{"ro"}, img, "truncated")
	_, stderr, code := fsckStatus(t, "-n", img)
	checkClearError(t, "fsck -n of a truncated image", stderr, code, 8, img, "truncated")
	_, stderr, code = fsckStatus(t, "-y", img)
	checkClearError(t, "fsck -y of a truncated image", stderr, code, 8, img, "truncated")
	_, stderr, code = runStreamfs("info", img)
	checkClearError(t, "info of a truncated image", stderr, code, 0, img, "truncated")
	if st, err := os.Stat(img); err != nil || st.Size() != 128<<20 {
		t.Errorf("the failed commands changed the truncated image: %v %v", st.Size(), err)
	}
}

// TestBadInputForeign gives the commands images that are not streamfs at
// all: ext4, zeros, random bytes, and files too small for a superblock.
func TestBadInputForeign(t *testing.T) {
	requireEnv(t)
	dir := t.TempDir()
	sparse := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ext4 := sparse("ext4.img", 256<<20)
	runCmd(t, "mkfs.ext4", "-q", "-F", ext4)
	zero := sparse("zero.img", 64<<20)
	random := filepath.Join(dir, "random.img")
	if err := os.WriteFile(random, randBytes(31, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := sparse("empty.img", 0)
	tiny := filepath.Join(dir, "tiny.img")
	if err := os.WriteFile(tiny, randBytes(32, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{ext4, zero, random, empty, tiny} {
		t.Run(filepath.Base(img), func(t *testing.T) {
			before, err := fileSHA(img)
			if err != nil {
				t.Fatal(err)
			}
			mnt := emptyDir(t)
			mountMustFail(t, "mount", img, mnt, nil, img, "not a streamfs")
			mountMustFail(t, "read-only mount", img, mnt, []string{"ro"}, img, "not a streamfs")
			_, stderr, code := fsckStatus(t, "-n", img)
			checkClearError(t, "fsck -n", stderr, code, 8, img, "not a streamfs")
			_, stderr, code = fsckStatus(t, "-y", img)
			checkClearError(t, "fsck -y", stderr, code, 8, img, "not a streamfs")
			_, stderr, code = runStreamfs("info", img)
			checkClearError(t, "info", stderr, code, 0, img, "not a streamfs")
			if after, err := fileSHA(img); err != nil || after != before {
				t.Errorf("the failed commands changed %s (%v)", img, err)
			}
		})
	}
}

// TestBadInputNewerFormat patches the version and feature fields of both
// superblock copies (with valid checksums): a newer version or an unknown
// incompat feature is refused, an unknown ro-compat feature allows only a
// read-only mount, an unknown compat feature is ignored.
func TestBadInputNewerFormat(t *testing.T) {
	requireEnv(t)
	base := mkfs(t, "256M")
	m := mountImage(t, base)
	data := randBytes(41, 300<<10)
	writeFile(t, m.path("f"), data, 0o644)
	m.unmount(t)

	field := func(off int, v uint32) func([]byte) {
		return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
	}
	t.Run("version", func(t *testing.T) {
		img := copyImage(t, base)
		patchSuper(t, img, field(8, 99))
		dir := emptyDir(t)
		mountMustFail(t, "mount of version 99", img, dir, nil, "newer")
		mountMustFail(t, "read-only mount of version 99", img, dir, []string{"ro"}, "newer")
		_, stderr, code := fsckStatus(t, "-n", img)
		checkClearError(t, "fsck -n of version 99", stderr, code, 8, "newer")
		_, stderr, code = fsckStatus(t, "-y", img)
		checkClearError(t, "fsck -y of version 99", stderr, code, 8, "newer")
		_, stderr, code = runStreamfs("info", img)
		checkClearError(t, "info of version 99", stderr, code, 0, "newer")
	})
	t.Run("incompat", func(t *testing.T) {
		img := copyImage(t, base)
		patchSuper(t, img, field(20, 0x80000000))
		dir := emptyDir(t)
		mountMustFail(t, "mount with an unknown incompat feature", img, dir, nil, "newer")
		mountMustFail(t, "read-only mount with an unknown incompat feature", img, dir, []string{"ro"}, "newer")
		_, stderr, code := fsckStatus(t, "-n", img)
		checkClearError(t, "fsck -n with an unknown incompat feature", stderr, code, 8, "newer")
	})
	t.Run("ro_compat", func(t *testing.T) {
		img := copyImage(t, base)
		patchSuper(t, img, field(16, 0x80000000))
		dir := emptyDir(t)
		mountMustFail(t, "read-write mount with an unknown ro-compat feature", img, dir, nil, "-o ro")
		m := mountAt(t, img, dir, "ro")
		checkContent(t, m.path("f"), data)
		if err := os.WriteFile(m.path("new"), []byte("x"), 0o644); err == nil {
			t.Errorf("writing to the read-only mount succeeded")
		}
		m.unmount(t)
		if got := readImageInfo(t, img).ROCompat; got != 0x80000000 {
			t.Errorf("ro-compat features after the read-only mount: %#x, want 0x80000000", got)
		}
	})
	t.Run("compat", func(t *testing.T) {
		img := copyImage(t, base)
		patchSuper(t, img, field(12, 0x80000000))
		m := mountImage(t, img)
		checkContent(t, m.path("f"), data)
		writeFile(t, m.path("new"), []byte("new"), 0o644)
		m = m.remount(t)
		checkContent(t, m.path("new"), []byte("new"))
		m.unmount(t)
		if got := readImageInfo(t, img).Compat; got != 0x80000000 {
			t.Errorf("compat features after mounting: %#x, want 0x80000000 kept", got)
		}
	})
}

// holdLock takes the device lock streamfs takes (flock LOCK_EX) on img,
// as another streamfs process would, until the test ends.
func holdLock(t *testing.T, img string) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		t.Fatalf("flock %s: %v", img, err)
	}
	t.Cleanup(func() { f.Close() })
}

// TestBadInputLocked checks a device another streamfs holds: mounted, or
// only locked (a daemon still starting, another fsck).
func TestBadInputLocked(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), []byte("locked"), 0o644)

	// (A second mount is a second view: TestSecondView.)
	_, stderr, code := fsckStatus(t, "-n", img)
	checkClearError(t, "fsck -n of a mounted image", stderr, code, 8, img, "mounted")
	_, stderr, code = fsckStatus(t, "-y", img)
	checkClearError(t, "fsck -y of a mounted image", stderr, code, 8, img, "mounted")
	checkContent(t, m.path("f"), []byte("locked"))
	m.unmount(t)

	// Only the lock, no mount. The tools would wait 30 s for a daemon
	// still exiting (TestLockWait); here they give up at once.
	t.Setenv("STREAMFS_LOCK_WAIT", "0")
	img2 := mkfs(t, "256M")
	holdLock(t, img2)
	mountMustFail(t, "mount of a locked image", img2, emptyDir(t), nil, img2, "in use")
	_, stderr, code = fsckStatus(t, "-n", img2)
	checkClearError(t, "fsck -n of a locked image", stderr, code, 8, img2, "in use")
	_, stderr, code = fsckStatus(t, "-y", img2)
	checkClearError(t, "fsck -y of a locked image", stderr, code, 8, img2, "in use")
}

// TestBadInputMissingPath gives every command a path that does not exist.
func TestBadInputMissingPath(t *testing.T) {
	requireEnv(t)
	missing := filepath.Join(t.TempDir(), "missing.img")
	mountMustFail(t, "mount", missing, emptyDir(t), nil, missing, "no such file")
	_, stderr, code := fsckStatus(t, "-n", missing)
	checkClearError(t, "fsck -n", stderr, code, 8, missing, "no such file")
	_, stderr, code = fsckStatus(t, "-y", missing)
	checkClearError(t, "fsck -y", stderr, code, 8, missing, "no such file")
	for _, args := range [][]string{{"info", missing}, {"info", "--json", missing}, {"bmap", missing}, {"stats", missing}} {
		_, stderr, code := runStreamfs(args...)
		checkClearError(t, strings.Join(args[:len(args)-1], " "), stderr, code, 0, missing)
	}
	_, stderr, code = runStreamfs("mkfs", missing)
	checkClearError(t, "mkfs without --size", stderr, code, 0, missing, "--size")
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("mkfs without --size created %s", missing)
	}
	// A missing parent directory, with --size.
	deep := filepath.Join(t.TempDir(), "no", "such", "dir", "x.img")
	_, stderr, code = runStreamfs("mkfs", "--size", "256M", deep)
	checkClearError(t, "mkfs in a missing directory", stderr, code, 0, "no such file")
}

// TestBadInputMountPoint gives mount points that are not directories. (An
// empty-but-not-empty or missing mount point is in TestMountErrors.)
func TestBadInputMountPoint(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(filepath.Join(full, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ mnt, want string }{
		{file, "not a directory"},
		{link, "not a directory"},
		{img, "not a directory"},
		{dangling, "no such file"},
		{filepath.Join(dir, "missing"), "no such file"},
		{full, "not an empty directory"},
	} {
		mountMustFail(t, "mount on "+filepath.Base(c.mnt), img, c.mnt, nil, c.want)
	}
	// The image is untouched and mounts.
	m := mountImage(t, img)
	m.unmount(t)
}

// TestBadInputDeadMount kills a daemon without unmounting: mounting on the
// dead mount again explains how to clear it.
func TestBadInputDeadMount(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), []byte("before the crash"), 0o644)
	// A fresh stat leaves the root's attributes cached, so that stat of
	// the dead mount may still succeed: the check must not rely on it.
	if _, err := os.Stat(m.dir); err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	m.stopped = true // the cleanup lazily unmounts the dead mount
	_, stderr, code := runStreamfs("mount", img, m.dir)
	checkClearError(t, "mount on a dead mount", stderr, code, 0, m.dir, "umount -l")
	// The mount helper form says the same.
	_, stderr, code = runStreamfs(img, m.dir, "-o", "rw")
	checkClearError(t, "mount helper on a dead mount", stderr, code, 0, m.dir, "umount -l")
	// fsck of the image the dead mount still lists: the same way out.
	_, stderr, code = runStreamfs("fsck", img)
	checkClearError(t, "fsck under a dead mount", stderr, code, 8, m.dir, "umount -l")

	runCmd(t, "umount", "-l", m.dir)
	m = mountAt(t, img, m.dir)
	checkContent(t, m.path("f"), []byte("before the crash"))
	m.unmount(t)
}

// TestFsckExitStatus checks e2fsck's exit statuses: 0 clean, 1 corrected,
// 4 left uncorrected, 8 operational error, 16 usage.
func TestFsckExitStatus(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	writeFile(t, m.path("f"), randBytes(51, 200<<10), 0o644)
	m.unmount(t)

	for _, args := range [][]string{{img}, {"-n", img}, {"-y", img}} {
		out, stderr, code := fsckStatus(t, args...)
		if code != 0 || !strings.Contains(out, "clean") {
			t.Errorf("fsck %v of a clean image: exit %d, want 0 and \"clean\":\n%s%s", args, code, out, stderr)
		}
	}

	for _, args := range [][]string{{}, {img, img}, {"-n", "-y", img}, {"-q", img}, {"-n"}} {
		_, stderr, code := fsckStatus(t, args...)
		if code != 16 || !strings.Contains(stderr, "usage") && !strings.Contains(stderr, "Usage") {
			t.Errorf("fsck %v: exit %d, want 16 and a usage message:\n%s", args, code, stderr)
		}
	}

	random := filepath.Join(t.TempDir(), "random.img")
	if err := os.WriteFile(random, randBytes(52, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(t.TempDir(), "missing.img"), random, t.TempDir()} {
		_, stderr, code := fsckStatus(t, "-n", p)
		checkClearError(t, "fsck -n "+p, stderr, code, 8, p)
	}
	locked := copyImage(t, img)
	holdLock(t, locked)
	t.Setenv("STREAMFS_LOCK_WAIT", "0") // no waiting for the holder (TestLockWait)
	_, stderr, code := fsckStatus(t, "-n", locked)
	checkClearError(t, "fsck -n of a locked image", stderr, code, 8, locked)

	// A damaged backup superblock: reported by -n (4), rewritten by -y (1).
	offs := superOffsets(t, img)
	writeAt(t, img, offs[1], randBytes(53, 512))
	out, stderr, code := fsckStatus(t, "-n", img)
	if code != 4 || !strings.Contains(out, "backup superblock") {
		t.Errorf("fsck -n with a damaged backup superblock: exit %d, want 4:\n%s%s", code, out, stderr)
	}
	out, stderr, code = fsckStatus(t, "-y", img)
	if code != 1 || !strings.Contains(out, "backup superblock") {
		t.Errorf("fsck -y with a damaged backup superblock: exit %d, want 1:\n%s%s", code, out, stderr)
	}
	if !bytes.Equal(readAt(t, img, 0, 512), readAt(t, img, offs[1], 512)) {
		t.Errorf("fsck -y did not rewrite the backup superblock as a copy of the primary")
	}
	out, stderr, code = fsckStatus(t, "-n", img)
	if code != 0 {
		t.Errorf("fsck -n after the repair: exit %d, want 0:\n%s%s", code, out, stderr)
	}
}

// TestBadInputCommandLine checks command lines that cannot be understood:
// exit 2 with a message, never a panic.
func TestBadInputCommandLine(t *testing.T) {
	requireEnv(t)
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	img := mkfs(t, "256M")
	mnt := emptyDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stream", "set", file, "abc"}, "abc"},
		{[]string{"stream", "set", file, "-1"}, "-1"},
		{[]string{"stream", "set", file, "4294967296"}, "4294967296"},
		{[]string{"stream", "set", file, "1.5"}, "1.5"},
		{[]string{"stream", "set", file, ""}, "stream"},
		{[]string{"stream", "set", file}, "stream"},
		{[]string{"stream", "frob", file}, "frob"},
		{[]string{"stream"}, "stream"},
		{nil, "usage"},
		{[]string{"frob"}, "frob"},
		{[]string{"mount", "-o", "bogus", img, mnt}, "bogus"},
		{[]string{"mount", "-o", "commit=0", img, mnt}, "commit"},
		{[]string{"mount", "-o", "placement=nowhere", img, mnt}, "placement"},
		{[]string{"mount", img}, "usage"},
		{[]string{img, mnt, "-o", "bogus"}, "bogus"},
		{[]string{"mkfs", "--size", "lots", filepath.Join(t.TempDir(), "x.img")}, "lots"},
		{[]string{"mkfs", "--size", "-5G", filepath.Join(t.TempDir(), "x.img")}, "size"},
	} {
		_, stderr, code := runStreamfs(c.args...)
		what := "streamfs " + strings.Join(c.args, " ")
		checkNoPanic(t, what, stderr)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, want 2 and a message naming %q:\n%s", what, code, c.want, stderr)
		}
		if isMounted(mnt) {
			t.Errorf("%s mounted %s", what, mnt)
			_, _ = tryCmd("umount", "-l", mnt)
		}
	}
}

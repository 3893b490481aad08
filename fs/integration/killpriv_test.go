package integration

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const nobody = 65534

// asNobody runs a shell command line as uid/gid 65534.
func asNobody(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %s: %v\n%s", script, err, out)
	}
}

// capBlob is a valid VFS_CAP_REVISION_2 security.capability value:
// cap_net_bind_service in the permitted set, effective.
func capBlob() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|0x1) // revision 2, effective
	binary.LittleEndian.PutUint32(b[4:], 1<<10)          // permitted: CAP_NET_BIND_SERVICE
	return b
}

// TestKillPriv checks that writes drop privileges as the kernel does on a
// local filesystem: setuid/setgid go away when a user without CAP_FSETID
// writes or truncates, and security.capability goes away on any write.
func TestKillPriv(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "1G")
	m := mountImage(t, img, "allow_other")
	openToOthers(t, m) // nobody must reach the mount point
	shared := m.path("shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}

	modeOf := func(p string) uint32 {
		t.Helper()
		return lstatT(t, p).Mode & 0o7777
	}
	mk := func(name, mode string, owner bool) string {
		t.Helper()
		p := filepath.Join(shared, name)
		writeFile(t, p, []byte("original\n"), 0o644)
		if owner {
			runCmd(t, "chown", "65534:65534", p)
		}
		runCmd(t, "chmod", mode, p)
		return p
	}

	// nobody owns a setuid file and appends to it: setuid goes.
	suid := mk("suid", "4755", true)
	asNobody(t, "echo more >> "+suid)
	if got := modeOf(suid); got != 0o755 {
		t.Errorf("setuid file written by its non-root owner: mode %o, want 755", got)
	}
	// setuid+setgid with group execute: both go.
	sgid := mk("sgid", "6775", true)
	asNobody(t, "echo more >> "+sgid)
	if got := modeOf(sgid); got != 0o775 {
		t.Errorf("setuid+setgid file written by a non-root user: mode %o, want 775", got)
	}
	// A root-owned setuid file writable by others, written by nobody.
	other := mk("other", "4777", false)
	asNobody(t, "echo more >> "+other)
	if got := modeOf(other); got != 0o777 {
		t.Errorf("root's setuid file written by nobody: mode %o, want 777", got)
	}
	// A truncate by nobody drops setuid too.
	trunc := mk("trunc", "4755", true)
	asNobody(t, "truncate -s 3 "+trunc)
	if got := modeOf(trunc); got != 0o755 {
		t.Errorf("setuid file truncated by a non-root user: mode %o, want 755", got)
	}
	// O_DIRECT writes by nobody drop it as well.
	direct := mk("direct", "4755", true)
	asNobody(t, "dd if=/dev/zero of="+direct+" bs=4096 count=1 oflag=direct conv=notrunc status=none")
	if got := modeOf(direct); got != 0o755 {
		t.Errorf("setuid file written with O_DIRECT by a non-root user: mode %o, want 755", got)
	}
	// Root keeps setuid on its writes (CAP_FSETID).
	rootw := mk("rootw", "4755", false)
	f, err := os.OpenFile(rootw, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("root\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := modeOf(rootw); got != 0o4755 {
		t.Errorf("setuid file written by root: mode %o, want 4755", got)
	}

	// security.capability goes on a write, even root's; user.* stays.
	capf := mk("cap", "755", false)
	if err := unix.Setxattr(capf, "security.capability", capBlob(), 0); err != nil {
		t.Fatalf("setting security.capability: %v", err)
	}
	if err := unix.Setxattr(capf, "user.keep", []byte("yes"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(capf, "security.capability", buf); err != nil || n != 20 {
		t.Fatalf("security.capability after setting it: %d bytes, %v", n, err)
	}
	f, err = os.OpenFile(capf, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := unix.Getxattr(capf, "security.capability", buf); !errors.Is(err, unix.ENODATA) {
		t.Errorf("security.capability after a write: %v, want ENODATA", err)
	}
	if n, err := unix.Getxattr(capf, "user.keep", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("user.keep after a write: %q, %v", buf[:n], err)
	}
	// And it stays gone after a remount.
	m = m.remount(t)
	if _, err := unix.Getxattr(m.path("shared", "cap"), "security.capability", buf); !errors.Is(err, unix.ENODATA) {
		t.Errorf("security.capability after a write and a remount: %v, want ENODATA", err)
	}
	for name, want := range map[string]uint32{"suid": 0o755, "sgid": 0o775, "other": 0o777, "trunc": 0o755, "direct": 0o755, "rootw": 0o4755} {
		if got := modeOf(m.path("shared", name)); got != want {
			t.Errorf("%s after remount: mode %o, want %o", name, got, want)
		}
	}
}

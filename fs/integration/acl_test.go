package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// requireTools skips unless the named programs are installed.
func requireTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s not installed (Debian: acl, attr)", n)
		}
	}
}

// nobodyCan reports whether uid/gid 65534 can run the shell command line;
// a failure other than "Permission denied" fails the test.
func nobodyCan(t *testing.T, script string) bool {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err == nil {
		return true
	}
	if !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("as nobody: %s: %v\n%s", script, err, out)
	}
	return false
}

// openToOthers makes every directory above the mount point searchable,
// so that another user reaches the mount (allow_other).
func openToOthers(t *testing.T, m *mount) {
	t.Helper()
	for p := m.dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil && !errors.Is(err, os.ErrPermission) {
			t.Fatal(err)
		}
	}
}

// With noacl (the default) the ACL names and the SELinux label answer
// EOPNOTSUPP, so `ls -l` asks for them once per run, not per file; the
// xattr namespaces streamfs keeps still work.
func TestXattrNoACL(t *testing.T) {
	requireEnv(t)
	requireTools(t, "setfacl", "setfattr", "getfattr")
	m := mountImage(t, mkfs(t, "256M"))
	const n = 500
	makeFiles(t, m.path("d"), n)
	m = m.remount(t) // cold: every attribute comes from the daemon
	var out string
	d := opsDelta(t, m, func() { out = runCmd(t, "ls", "-l", m.path("d")) })
	t.Logf("ls -l of %d files: %v", n, d)
	if got := strings.Count(out, " f0"); got != n {
		t.Fatalf("ls -l listed %d files, want %d", got, n)
	}
	if strings.Contains(out, "+ ") {
		t.Errorf("ls -l shows an ACL mark:\n%s", out[:min(len(out), 300)])
	}
	// coreutils asks once for the ACL and once for the label, then
	// remembers the device has neither.
	if d["GETXATTR"] > 4 {
		t.Errorf("%d GETXATTR for ls -l of %d files, want a few per run: %v", d["GETXATTR"], n, d)
	}
	// READDIRPLUS brought every attribute: nothing else per file either.
	if d["LOOKUP"]+d["GETATTR"] > 10 {
		t.Errorf("ls -l of %d files: %d LOOKUP and %d GETATTR: %v", n, d["LOOKUP"], d["GETATTR"], d)
	}

	p := m.path("d", "f00001")
	for _, name := range []string{"system.posix_acl_access", "system.posix_acl_default", "security.selinux"} {
		if _, err := unix.Getxattr(p, name, make([]byte, 64)); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("getxattr %s: %v, want EOPNOTSUPP", name, err)
		}
	}
	// (The kernel itself answers removing a default ACL of a file.)
	for _, name := range []string{"system.posix_acl_access", "security.selinux"} {
		if err := unix.Removexattr(p, name); !errors.Is(err, unix.EOPNOTSUPP) {
			t.Errorf("removexattr %s: %v, want EOPNOTSUPP", name, err)
		}
	}
	if err := unix.Setxattr(p, "security.selinux", []byte("system_u:object_r:tmp_t:s0\x00"), 0); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("setxattr security.selinux: %v, want EOPNOTSUPP", err)
	}
	if o, err := tryCmd("setfacl", "-m", "u:nobody:r", p); err == nil || !strings.Contains(o, "Operation not supported") {
		t.Errorf("setfacl on noacl: %v\n%s", err, o)
	}
	runCmd(t, "setfattr", "-n", "user.colour", "-v", "blue", p)
	runCmd(t, "setfattr", "-n", "trusted.t", "-v", "1", p)
	runCmd(t, "setfattr", "-n", "security.other", "-v", "2", p)
	got := runCmd(t, "getfattr", "-d", "-m", "-", p)
	for _, want := range []string{`user.colour="blue"`, `trusted.t="1"`, `security.other="2"`} {
		if !strings.Contains(got, want) {
			t.Errorf("getfattr -d: no %s in\n%s", want, got)
		}
	}
}

// With -o acl the kernel enforces ACLs, for another user too (through
// allow_other); setfacl and getfacl round-trip, chmod moves the mask,
// default ACLs are inherited in place of the umask, and all of it
// survives a remount.
func TestACL(t *testing.T) {
	requireEnv(t)
	requireTools(t, "setfacl", "getfacl")
	m := mountImage(t, mkfs(t, "256M"), "acl", "allow_other")
	openToOthers(t, m)
	p := m.path("secret")
	writeFile(t, p, []byte("s3cret\n"), 0o644)
	cat := "cat " + p
	if !nobodyCan(t, cat) {
		t.Fatal("nobody cannot read a 0644 file")
	}
	runCmd(t, "setfacl", "-m", "u:nobody:---", p)
	if nobodyCan(t, cat) {
		t.Error("nobody reads a file whose ACL denies nobody")
	}
	if got := lstatT(t, p).Mode & 0o777; got != 0o644 {
		t.Errorf("mode after setfacl: %o, want 644", got)
	}
	runCmd(t, "setfacl", "-m", "u:nobody:r,o::---", p)
	if !nobodyCan(t, cat) {
		t.Error("nobody cannot read a file whose ACL grants nobody read")
	}
	if got := lstatT(t, p).Mode & 0o777; got != 0o640 {
		t.Errorf("mode after setfacl o::---: %o, want 640", got)
	}
	acl := runCmd(t, "getfacl", "-c", p)
	for _, want := range []string{"user:nobody:r--", "mask::r--", "other::---"} {
		if !hasLine(acl, want) {
			t.Errorf("getfacl: no %q in\n%s", want, acl)
		}
	}
	// chmod sets the mask, which takes the grant away.
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if !hasLine(runCmd(t, "getfacl", "-c", p), "mask::---") {
		t.Errorf("chmod 600 left the mask:\n%s", runCmd(t, "getfacl", "-c", p))
	}
	if nobodyCan(t, cat) {
		t.Error("nobody reads after chmod 600")
	}
	// An ACL the mode says all of is not kept.
	runCmd(t, "setfacl", "-b", p)
	if o, _ := tryCmd("getfattr", "-n", "system.posix_acl_access", p); !strings.Contains(o, "No such attribute") {
		t.Errorf("access ACL kept after setfacl -b:\n%s", o)
	}

	// An ACL set by its owner outside the file's group clears set-group-ID
	// (the kernel's flag in the extended SETXATTR).
	sg := m.path("sgid")
	writeFile(t, sg, nil, 0o644)
	if err := os.Chown(sg, nobody, 0); err != nil {
		t.Fatal(err)
	}
	// unix.Chmod: os.Chmod takes os.ModeSetgid, not 0o2000.
	if err := unix.Chmod(sg, 0o2775); err != nil {
		t.Fatal(err)
	}
	if got := lstatT(t, sg).Mode & 0o7777; got != 0o2775 {
		t.Fatalf("chmod 2775: mode %o", got)
	}
	if !nobodyCan(t, "setfacl -m u:daemon:r "+sg) {
		t.Fatal("the owner cannot set an ACL")
	}
	if got := lstatT(t, sg).Mode & 0o7777; got != 0o775 {
		t.Errorf("setfacl by the owner outside the group: mode %o, want 775", got)
	}
	// The kernel sends that flag with a default ACL too, but only an
	// access ACL clears the bit (fuse.h; ext4, XFS): a shared set-group-ID
	// directory keeps it when its owner gives it a default ACL.
	sgd := m.path("sgid-dir")
	if err := os.Mkdir(sgd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sgd, nobody, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(sgd, 0o2775); err != nil {
		t.Fatal(err)
	}
	if !nobodyCan(t, "setfacl -d -m u:daemon:rx "+sgd) {
		t.Fatal("the owner cannot set a default ACL")
	}
	if got := lstatT(t, sgd).Mode & 0o7777; got != 0o2775 {
		t.Errorf("default ACL set by the owner outside the group: mode %o, want 2775", got)
	}

	// Default ACLs: a new file takes them instead of the umask; a new
	// directory takes them and passes them on.
	dir := m.path("shared")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runCmd(t, "setfacl", "-d", "-m", "u:nobody:rwx,g::rwx,o::---", dir)
	sh(t, fmt.Sprintf("umask 022 && touch %s/f && mkdir %s/sub && touch %s/plain && mkfifo %s/fifo", dir, dir, m.dir, dir))
	modes := map[string]uint32{dir + "/f": 0o660, dir + "/sub": 0o770, m.path("plain"): 0o644, dir + "/fifo": 0o660}
	for f, want := range modes {
		if got := lstatT(t, f).Mode & 0o777; got != want {
			t.Errorf("%s: mode %o, want %o", f, got, want)
		}
	}
	if !hasLine(runCmd(t, "getfacl", "-c", dir+"/f"), "user:nobody:rwx\t#effective:rw-") {
		t.Errorf("inherited ACL:\n%s", runCmd(t, "getfacl", "-c", dir+"/f"))
	}
	if !hasLine(runCmd(t, "getfacl", "-c", dir+"/sub"), "default:user:nobody:rwx") {
		t.Errorf("subdirectory did not inherit the default ACL:\n%s", runCmd(t, "getfacl", "-c", dir+"/sub"))
	}
	if !nobodyCan(t, "echo x > "+dir+"/f") {
		t.Error("nobody cannot write a file its inherited ACL grants")
	}
	// mknod inherits too.
	if !hasLine(runCmd(t, "getfacl", "-c", dir+"/fifo"), "user:nobody:rwx\t#effective:rw-") {
		t.Errorf("mkfifo did not inherit the default ACL:\n%s", runCmd(t, "getfacl", "-c", dir+"/fifo"))
	}

	m = m.remount(t)
	if !hasLine(runCmd(t, "getfacl", "-c", dir+"/f"), "user:nobody:rwx\t#effective:rw-") {
		t.Errorf("ACL after remount:\n%s", runCmd(t, "getfacl", "-c", dir+"/f"))
	}
	// Mounted noacl, the ACLs are neither shown nor enforced.
	m.unmount(t)
	m = mountAt(t, m.img, m.dir, "allow_other")
	if o := runCmd(t, "ls", "-l", dir); strings.Contains(o, "+ ") {
		t.Errorf("noacl mount shows ACL marks:\n%s", o)
	}
	if o := runCmd(t, "getfattr", "-d", "-m", "-", dir+"/f"); strings.Contains(o, "posix_acl") {
		t.Errorf("noacl mount lists ACLs:\n%s", o)
	}
}

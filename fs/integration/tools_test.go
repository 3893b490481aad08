package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The command line answers the habits of xfsprogs and e2fsprogs users.
func TestToolsHelpAndVersion(t *testing.T) {
	requireEnv(t)
	for _, c := range []string{"mkfs", "mount", "info", "fsck", "stream", "bmap", "stats", "version"} {
		out, stderr, err := tryCmdSplit(streamfsBin, c, "--help")
		if err != nil || !strings.HasPrefix(out, "usage: streamfs "+c) && c != "stream" || stderr != "" {
			t.Errorf("streamfs %s --help: %v, stdout %q, stderr %q", c, err, out, stderr)
		}
		if h, _, err := tryCmdSplit(streamfsBin, "help", c); err != nil || h != out {
			t.Errorf("streamfs help %s differs from %s --help (%v)", c, c, err)
		}
	}
	mountHelp := streamfs(t, "mount", "--help")
	for _, o := range []string{"placement=", "norecovery", "nosuid", "noatime", "log_format=", "remount"} {
		if !strings.Contains(mountHelp, o) {
			t.Errorf("mount --help does not list %s", o)
		}
	}
	if v := streamfs(t, "version"); !strings.Contains(v, "on-disk format version ") {
		t.Errorf("version: %q", v)
	}
	img := mkfs(t, "256M")
	if out, err := tryCmd(streamfsBin, "fsck", "-f", "-p", img); err != nil {
		t.Errorf("fsck -f -p: %v %s", err, out)
	}
	m := mountImage(t, img)
	writeFile(t, m.path("f"), []byte("x"), 0o644)
	if out, err := tryCmd(streamfsBin, "bmap", "-v", m.path("f")); err != nil || !strings.Contains(out, "STREAM") {
		t.Errorf("bmap -v: %v %s", err, out)
	}
	// Messages name the command, the path and what is wrong.
	out, _ := tryCmd(streamfsBin, "bmap", m.dir)
	if !strings.Contains(out, "is a directory") || strings.Contains(out, "streamfs mount?") {
		t.Errorf("bmap on a directory: %s", out)
	}
	out, _ = tryCmd(streamfsBin, "stream", "set", m.path("f"), "5")
	if !strings.HasPrefix(out, "streamfs stream: "+m.path("f")) || !strings.Contains(out, "4 streams") {
		t.Errorf("stream set above the limit: %s", out)
	}
	if out := streamfs(t, "stats", m.dir); !strings.Contains(out, "placement cache: on") {
		t.Errorf("stats: %s", out)
	}
	if out := streamfs(t, "info", m.dir); !strings.Contains(out, "backend  =file") {
		t.Errorf("info on a mount point lacks the backend: %s", out)
	}
}

// A failed mkfs leaves no image behind.
func TestMkfsFailureLeavesNothing(t *testing.T) {
	requireEnv(t)
	img := filepath.Join(t.TempDir(), "new.img")
	if out, err := tryCmd(streamfsBin, "mkfs", "--size", "1M", img); err == nil {
		t.Fatalf("mkfs of 1 MiB succeeded: %s", out)
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("failed mkfs left %s behind (%v)", img, err)
	}
}

// Ctrl-C on a busy mount says what to do and keeps serving; a second one
// after the files are closed unmounts.
func TestInterruptBusyMount(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"))
	f, err := os.Create(m.path("open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(m.log.String(), "is busy") {
		select {
		case <-m.exited:
			t.Fatalf("the daemon exited on Ctrl-C with a file open:\n%s", m.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	log := m.log.String()
	if !strings.Contains(log, "umount -l "+m.dir) || !strings.Contains(log, "Ctrl-C again") {
		t.Errorf("busy unmount message does not say what to do:\n%s", log)
	}
	if _, err := f.WriteString("still served"); err != nil {
		t.Errorf("write after the failed unmount: %v", err)
	}
	f.Close()
	if err := m.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	m.stopped = true
	if m.waitErr != nil {
		t.Errorf("daemon exit after the second Ctrl-C: %v\n%s", m.waitErr, m.log.String())
	}
}

// -o log_format=json logs one JSON object a line; -o debug shows no blank
// lines and logs where data was placed; SIGTERM is logged once.
func TestLogs(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img, "log_format=json", "debug")
	writeFile(t, m.path("f"), make([]byte, 8192), 0o644)
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	m.stopped = true
	log := m.log.String()
	placed := false
	for _, line := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		if msg, _ := e["msg"].(string); strings.TrimSpace(msg) == "" {
			t.Errorf("empty log message: %q", line)
		} else if msg == "write placed" && e["stream"] != nil && e["extents"] != nil {
			placed = true
		}
	}
	if !placed {
		t.Errorf("debug log has no placement decision:\n%s", log)
	}
	if n := strings.Count(log, "terminated"); n != 1 {
		t.Errorf("SIGTERM logged %d times:\n%s", n, log)
	}
}

// scripts/run.sh on the dead mount of a crashed daemon explains how to
// clear it instead of failing in mkdir.
func TestRunScriptDeadMount(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	m.stopped = true // the cleanup lazily unmounts the dead mount
	// Over io_uring the kernel aborts the connection when it tears the
	// daemon's rings down, a moment after the process is gone (ls says
	// "connection abort" meanwhile, which run.sh knows too). Wait for
	// either answer of a dead mount.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ls", m.dir).CombinedOutput()
		if strings.Contains(string(out), "not connected") || strings.Contains(string(out), "connection abort") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount still answers 10 s after its daemon was killed: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd := exec.Command("bash", "../../scripts/run.sh")
	cmd.Env = append(os.Environ(), "STREAMFS_MNT="+m.dir, "STREAMFS_IMAGE="+img,
		"STREAMFS_BINDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "umount -l "+m.dir) ||
		strings.Contains(string(out), "Transport endpoint") {
		t.Errorf("run.sh on a dead mount: %v\n%s", err, out)
	}
}

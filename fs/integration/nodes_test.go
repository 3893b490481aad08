package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// nodeStats is the daemon's count of the nodes it holds for inodes the
// kernel caches, their bound, and how many it asked the kernel to drop.
type nodeStats struct {
	Nodes  int    `json:"fuse_nodes"`
	Limit  int    `json:"fuse_node_limit"`
	Pruned uint64 `json:"fuse_nodes_pruned"`
}

func readNodeStats(t *testing.T, m *mount) nodeStats {
	t.Helper()
	var s nodeStats
	if err := json.Unmarshal([]byte(streamfs(t, "stats", "--json", m.dir)), &s); err != nil {
		t.Fatalf("stats --json: %v", err)
	}
	return s
}

// waitNodesBounded waits until the daemon holds at most its limit of
// nodes (the sweeper prunes in the background) and returns the stats.
func waitNodesBounded(t *testing.T, m *mount) nodeStats {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		s := readNodeStats(t, m)
		if s.Limit <= 0 {
			t.Fatalf("the daemon holds %d nodes with no limit", s.Nodes)
		}
		if s.Nodes <= s.Limit {
			return s
		}
		if strings.Contains(m.log.String(), "cannot prune inodes") {
			t.Skip("this kernel has no FUSE_NOTIFY_PRUNE")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon holds %d nodes after %v, limit %d (pruned %d)", s.Nodes, hangGuard, s.Limit, s.Pruned)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The daemon's memory follows the cache size, not what the kernel caches:
// with a tiny cache_size it holds a few hundred nodes while thousands of
// files are created and stat'ed, by asking the kernel to drop cold inodes.
// What the kernel cannot drop stays usable: an open file, a working
// directory; a dropped name is looked up again.
func TestNodesBoundedByCacheSize(t *testing.T) {
	requireEnv(t)
	m := mountImage(t, mkfs(t, "256M"), "cache_size=1M")
	deep := m.path("keep", "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("keep", "open"), []byte("still open"), 0o644)
	f, err := os.OpenFile(m.path("keep", "open"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A process whose working directory is deep: getcwd must keep working
	// (an invalidated dentry would make it fail or say "(deleted)").
	sleeper := exec.Command("sleep", "600")
	sleeper.Dir = deep
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()

	const n = 4000
	makeFiles(t, m.path("d"), n)
	s := waitNodesBounded(t, m)
	if s.Limit >= n/2 {
		t.Fatalf("node limit %d with cache_size=1M: the test needs it well under %d files", s.Limit, n)
	}
	if s.Pruned == 0 {
		t.Fatalf("%d files created, %d nodes held, none pruned", n, s.Nodes)
	}
	t.Logf("after %d creates: %d nodes, limit %d, %d pruned", n, s.Nodes, s.Limit, s.Pruned)

	// Every name resolves again, with its attributes.
	out := runCmd(t, "ls", "-l", m.path("d"))
	if got := strings.Count(out, " f"); got != n {
		t.Fatalf("ls -l listed %d files, want %d", got, n)
	}
	for i := 1; i <= n; i += 97 {
		if _, err := os.Stat(m.path("d", fmt.Sprintf("f%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	s = waitNodesBounded(t, m)
	t.Logf("after ls -l and stats: %d nodes, %d pruned", s.Nodes, s.Pruned)

	// The open file still works, by handle and by name.
	if _, err := f.WriteAt([]byte("STILL"), 0); err != nil {
		t.Fatalf("write to a file held open while nodes were pruned: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	checkContent(t, m.path("keep", "open"), []byte("STILL open"))
	// The working directory is still a live path.
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", sleeper.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if cwd != deep {
		t.Fatalf("working directory reads %q, want %q", cwd, deep)
	}
	pwd := exec.Command("sh", "-c", "cd . && /bin/pwd -P && ls")
	pwd.Dir = deep
	if b, err := pwd.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != deep {
		t.Fatalf("pwd in a working directory under pruning: %q, %v", b, err)
	}
	// Survives a remount with everything in place.
	f.Close()
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	m = m.remount(t)
	if got := strings.Count(runCmd(t, "ls", m.path("d")), "\n"); got != n {
		t.Fatalf("after remount ls listed %d names, want %d", got, n)
	}
	checkContent(t, m.path("keep", "open"), []byte("STILL open"))
}

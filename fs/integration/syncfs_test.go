package integration

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// syncfsMount calls syncfs(2) on the mount: the kernel reports there any
// error the daemon gave to its writeback of an inode's cached times.
func syncfsMount(t *testing.T, m *mount) error {
	t.Helper()
	f, err := os.Open(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// TestSyncfsAfterUnlink: with the writeback cache the kernel sends its
// cached times (SETATTR) for a file after its last close, even when the
// file was unlinked and the daemon has freed it. Answering that with
// ENOENT made the next syncfs(2) fail after any ordinary deletion.
func TestSyncfsAfterUnlink(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)

	// Create, write, unlink, close.
	p := m.path("f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syncfsMount(t, m); err != nil {
		t.Errorf("syncfs after write, unlink, close: %v", err)
	}

	// Write, close, then unlink (what `echo hi > f; rm f` does).
	if err := os.WriteFile(p, []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := syncfsMount(t, m); err != nil {
		t.Errorf("syncfs after write, close, unlink: %v", err)
	}

	// rm -rf of a tree of written files.
	for _, d := range []string{"t", "t/a", "t/a/b", "t/c"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"x", "y", "z"} {
			if err := os.WriteFile(m.path(d, n), randBytes(int64(len(d)), 10000), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	sh(t, "rm -rf "+m.path("t"))
	if err := syncfsMount(t, m); err != nil {
		t.Errorf("syncfs after rm -rf: %v", err)
	}
	m.unmount(t)
}

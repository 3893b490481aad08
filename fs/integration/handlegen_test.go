package integration

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A FUSE file handle (name_to_handle_at without AT_HANDLE_FID) is three
// 32-bit words after struct file_handle's 8-byte header: the node id's
// high and low halves, then the generation.
const handleGenOff = 8 + 8

// File handles carry a random generation (inode numbers are sequential,
// so a fixed generation would make every handle guessable), and a handle
// whose generation is wrong is refused with ESTALE, whether the inode is
// in the kernel's cache or not.
func TestFileHandleGenerations(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M")
	m := mountImage(t, img)
	tmp := t.TempDir()
	gens := map[uint32]bool{}
	var handles []string
	for _, name := range []string{"a", "b", "c", "d"} {
		writeFile(t, m.path(name), []byte("file "+name+"\n"), 0o644)
		h := filepath.Join(tmp, name)
		runProg(t, "handle", "save", m.path(name), h)
		b, err := os.ReadFile(h)
		if err != nil || len(b) < handleGenOff+4 {
			t.Fatalf("handle of %s: %d bytes, %v", name, len(b), err)
		}
		g := binary.NativeEndian.Uint32(b[handleGenOff:])
		if g == 0 || gens[g] {
			t.Errorf("handle of %s: generation %d (zero or repeated)", name, g)
		}
		gens[g] = true
		handles = append(handles, h)
	}
	// The same handle with its generation changed.
	forged := func(h string) string {
		b, err := os.ReadFile(h)
		if err != nil {
			t.Fatal(err)
		}
		g := binary.NativeEndian.Uint32(b[handleGenOff:])
		binary.NativeEndian.PutUint32(b[handleGenOff:], g^0x5a5a)
		p := h + ".forged"
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	check := func(when string) {
		for i, h := range handles {
			if out := runProg(t, "handle", "open", m.dir, h); !strings.Contains(out, "file ") {
				t.Errorf("%s: open_by_handle_at: %s", when, out)
			}
			out, err := tryCmd(progs["handle"], "open", m.dir, forged(h))
			if err == nil || !strings.Contains(out, "Stale file handle") {
				t.Errorf("%s: handle %d with a wrong generation: %v %s; want ESTALE", when, i, err, out)
			}
		}
	}
	check("cached")
	m = m.remount(t)
	// Forged handles first: the inodes are not in the kernel's cache.
	for i, h := range handles {
		out, err := tryCmd(progs["handle"], "open", m.dir, forged(h))
		if err == nil || !strings.Contains(out, "Stale file handle") {
			t.Errorf("after remount: handle %d with a wrong generation: %v %s; want ESTALE", i, err, out)
		}
	}
	check("after remount")
}

package nvme

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A partition is refused: passthrough would address the whole namespace.
func TestPartitionRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices")
	}
	for _, tool := range []string{"losetup", "sfdisk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	sf := exec.Command("sfdisk", "-q", img)
	sf.Stdin = strings.NewReader("label: dos\n,8M\n")
	if out, err := sf.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "-f", "-P", "--show", img).Output()
	if err != nil {
		t.Skipf("losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	// Without udev the partition's node may be missing: make one from sysfs.
	part := loop + "p1"
	sysDev := "/sys/class/block/" + filepath.Base(part) + "/dev"
	if _, err := os.Stat(sysDev); err != nil {
		exec.Command("partx", "-a", loop).Run() // some kernels scan only on request
	}
	if _, err := os.Stat(part); err != nil {
		dev, err := os.ReadFile(sysDev)
		if err != nil {
			t.Skipf("kernel shows no partition for %s: %v", loop, err)
		}
		var maj, min uint32
		if _, err := fmt.Sscanf(strings.TrimSpace(string(dev)), "%d:%d", &maj, &min); err != nil {
			t.Fatal(err)
		}
		part = filepath.Join(t.TempDir(), "p1")
		if err := unix.Mknod(part, unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))); err != nil {
			t.Fatal(err)
		}
	}
	for path, want := range map[string]bool{loop: false, part: true} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := isPartition(st); got != want {
			t.Errorf("isPartition(%s) = %v, want %v", path, got, want)
		}
	}
	if _, _, err := openExclusive(part, true); err == nil || !strings.Contains(err.Error(), "partition") {
		t.Errorf("opening a partition: %v, want a refusal", err)
	}
}

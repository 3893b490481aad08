// Command streamfs formats, mounts and inspects streamfs filesystems: a
// FUSE filesystem that owns a whole device and keeps write streams apart.
package main

import (
	"os"

	// The NVMe passthrough backend registers itself with package backend.
	_ "github.com/streamfs/streamfs/backend/nvme"
	// So does the emulated zoned device: a zoned image opens as one.
	_ "github.com/streamfs/streamfs/backend/zoned"
	// And the split device: a zoned device with a metadata device beside it.
	_ "github.com/streamfs/streamfs/backend/split"
	"github.com/streamfs/streamfs/fs/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}

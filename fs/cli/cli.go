// Package cli implements the streamfs subcommands; main.go only dispatches.
package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/streamfs/streamfs/backend/ftl"
	"github.com/streamfs/streamfs/fs/format"
)

// Exit statuses shared by the subcommands.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usageText = `usage: streamfs COMMAND [ARGS]

commands:
  mkfs [--size SIZE] [--ag-count N] [--block-size 4096] [-L LABEL] [-f|--force] [--ftl SPEC] PATH
  mount [-o OPTIONS] PATH MOUNTPOINT
  info [--json] PATH|MOUNTPOINT
  fsck [-n] [-y|-p] [-f] PATH
  stream max|get|set PATH [ID]
  bmap [-v] [--json] FILE
  stats [--json] MOUNTPOINT
  waf replay TRACE --ftl SPEC [...]
  version
  help [COMMAND]
  PATH MOUNTPOINT [-o OPTIONS]     (mount helper form, used by mount -t fuse.streamfs)

streamfs help COMMAND (or streamfs COMMAND --help) describes one command.
`

// commandHelp is each command's --help text.
var commandHelp = map[string]string{
	"mkfs": `usage: streamfs mkfs [--size SIZE] [--ag-count N] [--block-size 4096] [-L LABEL] [-f|--force] [--backend KIND] [--ftl SPEC] PATH
Formats a device or image file. A missing PATH is created as a sparse image
of --size (K, M, G, T suffixes); a failed mkfs removes the file it created.
  --size SIZE        image size (refused for a block device)
  --ag-count N       allocation groups (default: like mkfs.xfs)
  --block-size N     block size, a power of two from 512 to 65536 (4096)
  -L LABEL           filesystem label
  -f, --force        overwrite an existing filesystem, or resize an image
  --backend KIND     file, block, nvme or ftl (default: by what PATH is)
  --ftl SPEC         model an FDP SSD in the image (below)
  --ftl-trace FILE   record the device's commands from mkfs on (streamfs waf replay)
` + ftl.SpecHelp,
	"mount": mountHelp + "Drive model and streams:\n" + ftl.MountHelp,
	"info": `usage: streamfs info [--json] PATH|MOUNTPOINT
Prints the geometry of a device, image or mounted filesystem, like xfs_info.
`,
	"fsck": `usage: streamfs fsck [-n] [-y|-p] [-f] [--backend KIND] PATH
Checks an unmounted device or image.
  -n   check only, change nothing (the default)
  -y   repair every problem that can be repaired
  -p   the same as -y (e2fsck's "preen": every streamfs repair is automatic)
  -f   accepted for e2fsck habits: every check is a full check
Exit status as e2fsck: 0 clean, 1 errors corrected, 4 errors left, 8 operational error, 16 usage.
`,
	"stream": streamUsageText,
	"bmap": `usage: streamfs bmap [-v] [--json] FILE
Lists a file's extents with their allocation group and stream, like xfs_bmap -v
(-v is accepted; the output is always the verbose form).
`,
	"stats": `usage: streamfs stats [--json] MOUNTPOINT
Shows placement, per-AG and per-stream counters, and FDP statistics on NVMe.
`,
	"version": `usage: streamfs version
Prints the streamfs version and the on-disk format version it writes.
`,
}

// wantsHelp reports whether args asks for help (-h, --help, -help).
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			return true
		}
	}
	return false
}

// Version is the release, set with
// -ldflags "-X github.com/streamfs/streamfs/fs/cli.Version=...".
var Version = ""

// version implements `streamfs version`.
func version(args []string, stdout, stderr io.Writer) int {
	v := Version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	fmt.Fprintf(stdout, "streamfs %s, on-disk format version %d\n", v, format.Version)
	return exitOK
}

// commands are the subcommands by name.
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"mkfs":   Mkfs,
	"mount":  MountCmd,
	"info":   Info,
	"fsck":   Fsck,
	"stream": Stream,
	"bmap":   Bmap,
	"stats":  Stats,
}

func init() { commands["version"] = version }

// Main runs the streamfs command line and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if run, ok := commands[cmd]; ok {
		// --help is answered the same way, on stdout with status 0, by
		// every command.
		if wantsHelp(rest) {
			fmt.Fprint(stdout, commandHelp[cmd])
			return exitOK
		}
		return run(rest, stdout, stderr)
	}
	if cmd == "help" || cmd == "-h" || cmd == "--help" {
		if len(rest) > 0 {
			h, ok := commandHelp[rest[0]]
			if !ok {
				fmt.Fprintf(stderr, "streamfs help: unknown command %q\n%s", rest[0], usageText)
				return exitUsage
			}
			fmt.Fprint(stdout, h)
			return exitOK
		}
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	if cmd == "--version" || cmd == "-V" {
		return version(nil, stdout, stderr)
	}
	// Anything else with a second argument is the mount helper form that
	// mount.fuse3 runs: streamfs PATH MOUNTPOINT -o OPTIONS.
	if len(args) >= 2 && !strings.HasPrefix(cmd, "-") {
		return Helper(args, stdout, stderr)
	}
	fmt.Fprintf(stderr, "streamfs: unknown command %q\n%s", cmd, usageText)
	return exitUsage
}

// newFlags returns a flag set that reports errors to stderr without exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("streamfs "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses, allowing flags after positional arguments too.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// newLoggerFormat logs human-readable lines to stderr, or one JSON object
// a line for log shippers (-o log_format=json).
func newLoggerFormat(stderr io.Writer, debug, asJSON bool) *zap.Logger {
	level := zap.InfoLevel
	if debug {
		level = zap.DebugLevel
	}
	var enc zapcore.Encoder
	if asJSON {
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	} else {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(stderr), level))
}

func fail(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "streamfs %s: %v\n", cmd, err)
	return exitFail
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// warnTo prints backend warnings as one line on stderr.
func warnTo(stderr io.Writer, cmd string) func(string) {
	return func(msg string) { fmt.Fprintf(stderr, "streamfs %s: warning: %s\n", cmd, msg) }
}

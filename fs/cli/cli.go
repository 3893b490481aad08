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

// commandOrder lists the commands as usage shows them.
var commandOrder = []string{"mkfs", "mount", "info", "fsck", "stream", "bmap", "stats", "waf", "version", "help"}

// synopsis is each command's usage line after "streamfs ". The usage text,
// each --help and the usage errors print it; the README repeats it (a
// test compares them).
var synopsis = map[string]string{
	"mkfs":    "mkfs [--size SIZE] [--ag-count N] [--block-size 4096] [-L LABEL] [--backend KIND] [--ftl SPEC [--ftl-trace FILE] | --zoned SPEC] [--metadev METADEV] [-f|--force] PATH",
	"mount":   "mount [-o OPTIONS] PATH MOUNTPOINT",
	"info":    "info [--json] [--metadev METADEV] PATH|MOUNTPOINT",
	"fsck":    "fsck [-n] [-y|-p] [-f] [-v] [--backend KIND] [--metadev METADEV] PATH",
	"stream":  "stream max|get|set PATH [ID]",
	"bmap":    "bmap [-v] [--json] FILE",
	"stats":   "stats [--json | --interval SECONDS [--count N]] MOUNTPOINT",
	"waf":     "waf replay TRACE [--ftl SPEC] [--no-discard] [--trim-every SIZE] [--map S:H,...] [--interval SIZE] [--json] [--plot FILE.png]",
	"version": "version",
	"help":    "help [COMMAND]",
}

// helperSynopsis is the mount helper form mount.fuse3 runs.
const helperSynopsis = "PATH MOUNTPOINT -o OPTIONS"

// usageText is `streamfs help`.
var usageText = func() string {
	var b strings.Builder
	b.WriteString("usage: streamfs COMMAND [ARGS]\n\ncommands:\n")
	for _, c := range commandOrder {
		b.WriteString("  " + synopsis[c] + "\n")
	}
	b.WriteString("  " + helperSynopsis + "     (mount helper form, used by mount -t fuse.streamfs)\n")
	b.WriteString("\nstreamfs help COMMAND (or streamfs COMMAND --help) describes one command.\n")
	return b.String()
}()

// usageLine is the one-line usage a command prints on a bad command line.
func usageLine(cmd string) string { return "usage: streamfs " + synopsis[cmd] }

// flagCommands build their flag sets here, so that the parser and the
// help text read the same definitions.
var flagCommands = map[string]func(stderr io.Writer) *flag.FlagSet{
	"mkfs":  func(w io.Writer) *flag.FlagSet { f, _ := mkfsFlags(w); return f },
	"info":  func(w io.Writer) *flag.FlagSet { f, _, _ := infoFlags(w); return f },
	"fsck":  func(w io.Writer) *flag.FlagSet { f, _, _, _, _, _ := fsckFlags(w); return f },
	"bmap":  func(w io.Writer) *flag.FlagSet { f, _ := bmapFlags(w); return f },
	"stats": func(w io.Writer) *flag.FlagSet { f, _ := statsFlags(w); return f },
}

// about is what a command does, between its usage line and its options.
var about = map[string]string{
	"mkfs": `Formats a device or image file. A missing PATH is created as a sparse image
of --size; a failed mkfs removes the file it created.
`,
	"info": `Prints the geometry of a device, image or mounted filesystem, like xfs_info.
`,
	"fsck": `Checks an unmounted device or image; by default it changes nothing.
Exit status as e2fsck: 0 clean, 1 errors corrected, 4 errors left, 8 operational error, 16 usage.
`,
	"bmap": `Lists a file's extents with their allocation group and stream, like xfs_bmap -v.
`,
	"stats": `Shows placement, per-AG and per-stream counters, and FDP statistics on NVMe
or a modelled FDP SSD.
`,
	"version": `Prints the streamfs version and the on-disk format version it writes.
`,
}

// commandHelp returns a command's --help text.
func commandHelp(cmd string) (string, bool) {
	switch cmd {
	case "mount":
		return mountHelp + "Drive model and streams:\n" + ftl.MountHelp, true
	case "waf":
		return usageLine("waf") + "\n" + wafHelp, true
	case "stream":
		return streamUsageText, true
	case "help":
		return "usage: streamfs " + synopsis["help"] + "\n", true
	}
	if _, ok := synopsis[cmd]; !ok {
		return "", false
	}
	text := usageLine(cmd) + "\n" + about[cmd]
	if mk := flagCommands[cmd]; mk != nil {
		text += flagHelp(mk(io.Discard))
	}
	if cmd == "mkfs" {
		text += ftl.SpecHelp
	}
	return text, true
}

// flagHelp lists a flag set's flags with their usage strings; flags that
// share a value (-f and --force) share a line.
func flagHelp(fs *flag.FlagSet) string {
	type entry struct {
		names []string
		arg   string
		usage string
	}
	var list []*entry
	byValue := map[string]*entry{}
	fs.VisitAll(func(f *flag.Flag) {
		name := "-" + f.Name
		if len(f.Name) > 1 {
			name = "--" + f.Name
		}
		// Aliases are registered on the same variable: same usage text.
		if e := byValue[f.Usage]; e != nil {
			e.names = append(e.names, name)
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
			arg = ""
		}
		if d := f.DefValue; d != "" && d != "0" && d != "false" {
			usage += " (default " + d + ")"
		}
		e := &entry{names: []string{name}, arg: arg, usage: usage}
		byValue[f.Usage] = e
		list = append(list, e)
	})
	var b strings.Builder
	for _, e := range list {
		left := strings.Join(e.names, ", ")
		if e.arg != "" {
			left += " " + e.arg
		}
		writeOptionLine(&b, left, e.usage)
	}
	return b.String()
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
			h, _ := commandHelp(cmd)
			fmt.Fprint(stdout, h)
			return exitOK
		}
		return run(rest, stdout, stderr)
	}
	if cmd == "help" || cmd == "-h" || cmd == "--help" {
		if len(rest) > 0 {
			h, ok := commandHelp(rest[0])
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

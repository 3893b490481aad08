// Package cli implements the streamfs subcommands; main.go only dispatches.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Exit statuses shared by the subcommands.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usageText = `usage: streamfs COMMAND [ARGS]

commands:
  mkfs [--size SIZE] [--ag-count N] [--block-size 4096] [-L LABEL] [-f|--force] PATH
  mount [-o OPTIONS] PATH MOUNTPOINT
  info [--json] PATH|MOUNTPOINT
  fsck [-n] [-y] PATH
  stream max|get|set PATH [ID]
  bmap [--json] FILE
  stats [--json] MOUNTPOINT
  PATH MOUNTPOINT [-o OPTIONS]     (mount helper form, used by mount -t fuse.streamfs)
`

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

// Main runs the streamfs command line and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	if run, ok := commands[cmd]; ok {
		return run(rest, stdout, stderr)
	}
	if cmd == "help" || cmd == "-h" || cmd == "--help" {
		fmt.Fprint(stdout, usageText)
		return exitOK
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

// ParseSize parses sizes like 512, 64K, 10M, 2G, 1T (powers of 1024).
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty size")
	}
	mult := int64(1)
	num := s
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	}
	if mult > 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid size %q (a positive number with an optional K, M, G or T suffix)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return n * mult, nil
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

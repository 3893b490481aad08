package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/ioctl"
)

// Exit statuses of the stream subcommand: the usual Unix split between a
// failed operation and a command line that could not be understood.
const (
	streamExitOK    = 0
	streamExitFail  = 1
	streamExitUsage = 2
)

const streamUsageText = `Usage:
  streamfs stream max PATH       - Get max supported streams
  streamfs stream get PATH       - Get current stream ID
  streamfs stream set PATH ID    - Set stream ID (0 clears it)
`

// Stream implements `streamfs stream max|get|set PATH [ID]`, the Go
// counterpart of the seed's example program: same operations, same output
// lines, and errors in the same perror form with the C library's wording, so
// scripts written against the C tool keep working. args excludes the
// "stream" word itself. It returns the process exit status.
func Stream(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, streamUsageText)
		return streamExitOK
	}
	req, err := parseStreamArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "streamfs stream: %v\n", err)
		fmt.Fprint(stderr, streamUsageText)
		return streamExitUsage
	}

	f, err := openForStream(req.path, req.op)
	if err != nil {
		fmt.Fprintf(stderr, "streamfs stream: open %s: %s\n", req.path, errText(err))
		return streamExitFail
	}
	defer f.Close()

	rc, err := f.SyscallConn()
	if err != nil {
		fmt.Fprintf(stderr, "ioctl(%s) failed: %v\n", ioctl.OpName(req.op), err)
		return streamExitFail
	}
	var value uint32
	var opErr error
	// Control keeps f alive and its descriptor valid for the duration of
	// the call, without File.Fd's side effect of switching to blocking mode.
	ctlErr := rc.Control(func(fd uintptr) {
		switch req.op {
		case ioctl.OpGetMax:
			value, opErr = ioctl.GetMax(fd)
		case ioctl.OpGet:
			value, opErr = ioctl.Get(fd)
		case ioctl.OpSet:
			opErr = ioctl.Set(fd, req.id)
			value = req.id
		}
	})
	if ctlErr != nil {
		opErr = ctlErr
	}
	if opErr != nil {
		msg := fmt.Sprintf("streamfs stream: %s: ioctl(%s) failed: %s", req.path, ioctl.OpName(req.op), errText(opErr))
		if h := streamHint(f, req, opErr); h != "" {
			msg += ": " + h
		}
		fmt.Fprintln(stderr, msg)
		return streamExitFail
	}

	switch req.op {
	case ioctl.OpGetMax:
		fmt.Fprintf(stdout, "Max streams supported: %d\n", value)
	case ioctl.OpGet:
		fmt.Fprintf(stdout, "Current stream ID: %d\n", value)
		// Beyond the seed's output: where the file's or directory's
		// stream came from. Non-streamfs mounts just skip the line.
		if doc, err := queryFile(req.path, ioctl.QueryStream); err == nil {
			var b sfs.StreamDoc
			if json.Unmarshal(doc, &b) == nil && b.StreamSource != "" {
				fmt.Fprintf(stdout, "Stream source: %s\n", b.StreamSource)
			}
		}
	case ioctl.OpSet:
		fmt.Fprintf(stdout, "Set stream ID to: %d\n", value)
	}
	return streamExitOK
}

// streamHint explains a failed ioctl in the filesystem's terms: what is
// wrong and, for an id out of range, what the limit is.
func streamHint(f *os.File, req streamRequest, err error) string {
	switch {
	case errors.Is(err, syscall.ENOTTY):
		return "not on a streamfs mount (or a filesystem without write streams)"
	case errors.Is(err, syscall.EBADF) && req.op == ioctl.OpSet:
		return "setting a stream needs the file open for writing; you may lack write permission"
	case errors.Is(err, syscall.EPERM) && req.op == ioctl.OpSet:
		return "setting a directory's stream needs its owner, root, or write permission on it"
	case errors.Is(err, syscall.EROFS):
		return "the filesystem is read-only"
	case errors.Is(err, syscall.EINVAL) && req.op == ioctl.OpSet:
		var max uint32
		var merr error
		if rc, cerr := f.SyscallConn(); cerr == nil {
			_ = rc.Control(func(fd uintptr) { max, merr = ioctl.GetMax(fd) })
		}
		if merr == nil && req.id > max {
			return fmt.Sprintf("stream ID %d is above this filesystem's %d streams (valid IDs: 0 to %d; 0 clears)", req.id, max, max)
		}
	}
	return ""
}

// streamRequest is a parsed command line.
type streamRequest struct {
	op   uint32
	path string
	id   uint32
}

// parseStreamArgs checks the command line strictly: unlike the seed's
// atoi, an id that is not a plain decimal number in 0..2^32-1 is refused,
// because silently reading "abc" or "-1" as some other id would tag data
// with a stream the user never asked for.
func parseStreamArgs(args []string) (streamRequest, error) {
	if len(args) == 0 {
		return streamRequest{}, errors.New("missing operation (max, get or set)")
	}
	var req streamRequest
	want := 2
	switch args[0] {
	case "max":
		req.op = ioctl.OpGetMax
	case "get":
		req.op = ioctl.OpGet
	case "set":
		req.op = ioctl.OpSet
		want = 3
	default:
		return streamRequest{}, fmt.Errorf("unknown operation %q", args[0])
	}
	if len(args) < 2 {
		return streamRequest{}, fmt.Errorf("%s: missing PATH", args[0])
	}
	if len(args) < want {
		return streamRequest{}, fmt.Errorf("%s: missing stream ID", args[0])
	}
	if len(args) > want {
		return streamRequest{}, fmt.Errorf("%s: unexpected argument %q", args[0], args[want])
	}
	req.path = args[1]
	if req.path == "" {
		return streamRequest{}, fmt.Errorf("%s: empty PATH", args[0])
	}
	if req.op == ioctl.OpSet {
		id, err := parseStreamID(args[2])
		if err != nil {
			return streamRequest{}, err
		}
		req.id = id
	}
	return req, nil
}

// parseStreamID accepts decimal digits only: strconv would otherwise take
// a leading '+' and underscores are already refused with base 10.
func parseStreamID(s string) (uint32, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid stream ID %q: want a decimal number from 0 to %d", s, uint32(1<<32-1))
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid stream ID %q: want a decimal number from 0 to %d: %w", s, uint32(1<<32-1), err)
	}
	return uint32(v), nil
}

// openForStream opens path the way each operation needs. Reads need no
// write access, so max and get open read-only and work on files the user
// cannot write. SET requires a descriptor open for writing (the filesystem
// answers EBADF otherwise), except on a directory, which can never be opened
// for writing and where ownership is checked instead. O_NONBLOCK keeps a
// FIFO or device node from blocking the open; no I/O is ever done on the
// descriptor, so it changes nothing else.
func openForStream(path string, op uint32) (*os.File, error) {
	const common = syscall.O_NONBLOCK | syscall.O_NOCTTY
	if op != ioctl.OpSet {
		return os.OpenFile(path, os.O_RDONLY|common, 0)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|common, 0)
	if errors.Is(err, syscall.EISDIR) {
		return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|common, 0)
	}
	return f, err
}

// errText renders err as perror would: the C library's message for the
// underlying errno, or the error's own text if there is none.
func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return cStrerror(errno)
	}
	return err.Error()
}

// cStrerror returns glibc's strerror wording for errno. Go's own table is
// generated from the same strings with the first letter lowercased, which
// was checked against glibc for every errno 1..133; the only differences
// are the unassigned numbers and EHWPOISON, which Go lacks.
func cStrerror(errno syscall.Errno) string {
	if errno == unix.EHWPOISON {
		return "Memory page has hardware error"
	}
	s := errno.Error()
	if s == "" || strings.HasPrefix(s, "errno ") {
		return fmt.Sprintf("Unknown error %d", uintptr(errno))
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// Package rules maps file names to write streams for programs that cannot
// set streams themselves, like F2FS's extension lists for hot and cold
// files: a RocksDB directory holds its WAL (*.log), tables (*.sst) and
// MANIFEST-* side by side, so a stream by directory cannot separate them.
//
// A rule is PATTERN:STREAM, PATTERN a glob (path.Match: *, ?, [...], \)
// matched against a new file's name (not its path), STREAM a stream id
// from 1. Rules are tried in order; the first match wins. In a mount
// option rules are separated by ';' (mount(8) splits options at commas);
// in a rules file, one per line, with blank lines and #-comments allowed.
package rules

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
)

// ErrRule means a rule could not be parsed or names an unusable stream.
// Rule errors match it with errors.Is; their text says what is wrong
// without repeating it.
var ErrRule = errors.New("bad stream rule")

// ruleError is a rule error: its own message, ErrRule for errors.Is, and
// the cause (if any) for errors.As.
type ruleError struct {
	msg   string
	cause error
}

func (e *ruleError) Error() string        { return e.msg }
func (e *ruleError) Is(target error) bool { return target == ErrRule }
func (e *ruleError) Unwrap() error        { return e.cause }

func ruleErr(cause error, format string, a ...any) error {
	return &ruleError{msg: fmt.Sprintf(format, a...), cause: cause}
}

// Rule maps names matching Pattern to Stream.
type Rule struct {
	Pattern string
	Stream  uint32
}

// Set is an ordered list of rules; the nil Set matches nothing.
type Set struct {
	rules []Rule
}

// Parse reads rules separated by ';' (the mount option's syntax). where
// names the source in errors.
func Parse(s, where string) (*Set, error) {
	set := &Set{}
	for i, r := range strings.Split(s, ";") {
		if strings.TrimSpace(r) == "" {
			continue
		}
		rule, err := parseRule(r)
		if err != nil {
			return nil, fmt.Errorf("%s: rule %d %q: %w", where, i+1, r, err)
		}
		set.rules = append(set.rules, rule)
	}
	return set, nil
}

// ParseReader reads one rule per line.
func ParseReader(r io.Reader, where string) (*Set, error) {
	set := &Set{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rule, err := parseRule(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", where, n, line, err)
		}
		set.rules = append(set.rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return set, nil
}

// ParseFile reads a rules file.
func ParseFile(name string) (*Set, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("stream rules file: %w", err)
	}
	defer f.Close()
	return ParseReader(f, name)
}

func parseRule(r string) (Rule, error) {
	r = strings.TrimSpace(r)
	// The last colon separates: a pattern may contain colons, an id not.
	i := strings.LastIndexByte(r, ':')
	if i < 0 {
		return Rule{}, ruleErr(nil, "want PATTERN:STREAM")
	}
	pat, idS := strings.TrimSpace(r[:i]), strings.TrimSpace(r[i+1:])
	if pat == "" {
		return Rule{}, ruleErr(nil, "empty pattern")
	}
	if strings.Contains(pat, "/") {
		return Rule{}, ruleErr(nil, "pattern %q has a '/': rules match file names, not paths", pat)
	}
	if _, err := path.Match(pat, ""); err != nil {
		return Rule{}, ruleErr(err, "pattern %q: %v", pat, err)
	}
	id, err := strconv.ParseUint(idS, 10, 32)
	if err != nil || id == 0 {
		return Rule{}, ruleErr(err, "stream %q: want a stream id from 1", idS)
	}
	return Rule{Pattern: pat, Stream: uint32(id)}, nil
}

// Append adds o's rules after s's (the option's rules, then the file's).
func (s *Set) Append(o *Set) *Set {
	if o == nil {
		return s
	}
	if s == nil {
		return o
	}
	return &Set{rules: append(append([]Rule(nil), s.rules...), o.rules...)}
}

// Check refuses rules whose stream is above max, the mount's number of
// streams.
func (s *Set) Check(max uint32) error {
	if s == nil {
		return nil
	}
	for _, r := range s.rules {
		if r.Stream > max {
			return ruleErr(nil, "rule %s:%d: stream %d is above this filesystem's %d streams (valid stream IDs: 1 to %d)",
				r.Pattern, r.Stream, r.Stream, max, max)
		}
	}
	return nil
}

// Match returns the stream of the first rule matching name, 0 if none.
func (s *Set) Match(name string) uint32 {
	if s == nil {
		return 0
	}
	for _, r := range s.rules {
		if ok, _ := path.Match(r.Pattern, name); ok {
			return r.Stream
		}
	}
	return 0
}

// Rules returns a copy of the rules.
func (s *Set) Rules() []Rule {
	if s == nil {
		return nil
	}
	return append([]Rule(nil), s.rules...)
}

// String renders the set in the mount option's syntax.
func (s *Set) String() string {
	var b []string
	for _, r := range s.Rules() {
		b = append(b, fmt.Sprintf("%s:%d", r.Pattern, r.Stream))
	}
	return strings.Join(b, ";")
}

package cli

import (
	"bytes"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// readme returns the project's README.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeSynopsis returns the README's synopsis line of cmd (after
// "streamfs "), from its command-line block.
func readmeSynopsis(t *testing.T, text, cmd string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if s, ok := strings.CutPrefix(l, "streamfs "+cmd); ok && (s == "" || s[0] == ' ') {
			return strings.TrimPrefix(l, "streamfs ")
		}
	}
	t.Errorf("README has no synopsis line for %s", cmd)
	return ""
}

// TestHelpMatchesParsers: every flag and mount option the parsers accept
// is in the command's help and in the README, and the README's synopsis
// is help's.
func TestHelpMatchesParsers(t *testing.T) {
	doc := readme(t)
	for _, cmd := range commandOrder {
		if got := readmeSynopsis(t, doc, cmd); got != synopsis[cmd] {
			t.Errorf("README synopsis of %s:\n  %s\nhelp's:\n  %s", cmd, got, synopsis[cmd])
		}
		var out bytes.Buffer
		if code := Main([]string{"help", cmd}, &out, io.Discard); code != exitOK {
			t.Errorf("help %s: exit %d", cmd, code)
		}
		if !strings.HasPrefix(out.String(), "usage: streamfs "+synopsis[cmd]+"\n") && cmd != "stream" {
			t.Errorf("help %s does not start with its synopsis:\n%s", cmd, out.String())
		}
	}
	if !strings.Contains(doc, "streamfs "+helperSynopsis) || !strings.Contains(usageText, helperSynopsis) {
		t.Errorf("the mount helper form %q is missing from the README or the usage", helperSynopsis)
	}
	for cmd, mk := range flagCommands {
		help, _ := commandHelp(cmd)
		syn := synopsis[cmd]
		mk(io.Discard).VisitAll(func(f *flag.Flag) {
			name := "-" + f.Name
			if len(f.Name) > 1 {
				name = "--" + f.Name
			}
			if !containsWord(help, name) {
				t.Errorf("help %s does not list %s", cmd, name)
			}
			if !containsWord(syn, name) {
				t.Errorf("the synopsis of %s (help's and the README's) lacks %s", cmd, name)
			}
		})
	}
	var out bytes.Buffer
	Main([]string{"mount", "--help"}, &out, io.Discard)
	for _, mo := range mountOptions {
		for _, n := range mo.names {
			spelled := n
			if mo.arg != "" {
				spelled += "="
			}
			if !strings.Contains(out.String(), spelled) {
				t.Errorf("mount --help does not list %s", spelled)
			}
			if !strings.Contains(doc, "`"+spelled) {
				t.Errorf("the README's mount options do not list `%s`", spelled)
			}
			// What help lists, the parser takes.
			opt := spelled
			if mo.arg != "" {
				opt += strings.FieldsFunc(mo.arg, func(r rune) bool { return r == '|' })[0]
			}
			if _, err := parseMountOpts([]string{opt}); err != nil && mo.arg != "" && !isPlaceholder(mo.arg) {
				t.Errorf("-o %s, as help shows it: %v", opt, err)
			}
		}
	}
	for k := range genericOpts {
		if !strings.Contains(out.String(), k) {
			t.Errorf("mount --help does not list the generic option %s", k)
		}
	}
}

// isPlaceholder reports whether a help argument names a value (SIZE)
// rather than listing the choices.
func isPlaceholder(arg string) bool { return strings.ToUpper(arg) == arg }

// containsWord reports whether s has w not followed by another name
// character (so "--count" is not found in "--counter").
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		end := i + j + len(w)
		if end == len(s) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz-_", rune(s[end])) {
			return true
		}
		i = end
	}
}

// TestErrorsContinueRefused: help no longer offers errors=continue, and
// the parser says what it does instead.
func TestErrorsContinueRefused(t *testing.T) {
	if strings.Contains(mountHelp, "continue") {
		t.Errorf("mount --help offers errors=continue, which is refused")
	}
	if _, err := parseMountOpts([]string{"errors=continue"}); err == nil || !strings.Contains(err.Error(), "errors=shutdown") {
		t.Errorf("errors=continue: %v", err)
	}
	for _, v := range []string{"shutdown", "remount-ro"} {
		if _, err := parseMountOpts([]string{"errors=" + v}); err != nil {
			t.Errorf("errors=%s: %v", v, err)
		}
	}
}

package rules

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAndMatch(t *testing.T) {
	s, err := Parse("*.log:1; *.sst:2;MANIFEST-*:3;;a:b:4", "-o stream_rules")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{
		"000123.log": 1, "000042.sst": 2, "MANIFEST-000005": 3, "CURRENT": 0,
		"x.sst.tmp": 0, "a:b": 4, "LOG": 0, ".log": 1,
	} {
		if got := s.Match(name); got != want {
			t.Errorf("Match(%q) = %d, want %d", name, got, want)
		}
	}
	if s.String() != "*.log:1;*.sst:2;MANIFEST-*:3;a:b:4" {
		t.Errorf("String() = %q", s.String())
	}
	var nilSet *Set
	if nilSet.Match("x.log") != 0 || nilSet.Check(0) != nil {
		t.Error("nil set matched")
	}
}

func TestFirstMatchWins(t *testing.T) {
	s, _ := Parse("*.log:1;*:2", "x")
	o, _ := Parse("*.log:3;*.sst:4", "y")
	all := s.Append(o)
	if all.Match("a.log") != 1 || all.Match("a.sst") != 2 {
		t.Fatalf("rules %v", all.Rules())
	}
	if len(s.Rules()) != 2 {
		t.Fatal("Append changed its receiver")
	}
}

func TestBadRules(t *testing.T) {
	for _, r := range []string{"*.log", "*.log:", "*.log:0", "*.log:-1", "*.log:x", ":1", "[a:1", "dir/*.log:1", "*.log:99999999999"} {
		_, err := Parse(r, "-o stream_rules")
		if !errors.Is(err, ErrRule) {
			t.Errorf("%q: err %v, want ErrRule", r, err)
			continue
		}
		if !strings.Contains(err.Error(), "-o stream_rules") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %q does not name its source on one line", r, err)
		}
	}
}

func TestCheckMax(t *testing.T) {
	s, _ := Parse("*.log:1;*.sst:9", "x")
	if err := s.Check(8); !errors.Is(err, ErrRule) || !strings.Contains(err.Error(), "*.sst:9") {
		t.Fatalf("Check(8): %v", err)
	}
	if err := s.Check(9); err != nil {
		t.Fatal(err)
	}
}

func TestParseReader(t *testing.T) {
	in := "# RocksDB\n\n*.log:1\n  *.sst : 2  \n#x:1\nMANIFEST-*:3\n"
	s, err := ParseReader(strings.NewReader(in), "rules.txt")
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "*.log:1;*.sst:2;MANIFEST-*:3" {
		t.Fatalf("got %q", s.String())
	}
	_, err = ParseReader(strings.NewReader("*.log:1\nbad\n"), "rules.txt")
	if !errors.Is(err, ErrRule) || !strings.Contains(err.Error(), "rules.txt:2") {
		t.Fatalf("err %v, want one naming rules.txt:2", err)
	}
	if _, err := ParseFile("/nonexistent/rules"); err == nil {
		t.Fatal("missing file accepted")
	}
}

// Messages say what is wrong once, without a trailing "bad stream rule".
func TestRuleMessages(t *testing.T) {
	_, err := Parse("*.log", "-o stream_rules")
	if err == nil || strings.Contains(err.Error(), ErrRule.Error()) {
		t.Errorf("parse error %q repeats %q", err, ErrRule)
	}
	s, _ := Parse("*.log:99", "x")
	err = s.Check(4)
	if !errors.Is(err, ErrRule) || strings.Contains(err.Error(), ErrRule.Error()) || !strings.Contains(err.Error(), "1 to 4") {
		t.Errorf("Check(4) = %q, want the limit and no %q", err, ErrRule)
	}
}

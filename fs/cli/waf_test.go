package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamfs/streamfs/backend/ftl"
)

// mkfs with a trace, then `waf replay` of it on the same drive: the replay
// gives the counters the model saved, preconditioning included.
func TestMkfsTraceReplay(t *testing.T) {
	dir := t.TempDir()
	img, trace := filepath.Join(dir, "img"), filepath.Join(dir, "trace")
	spec := "op=14,ru=256K,handles=4,precondition=random"
	var out, errb bytes.Buffer
	if code := Main([]string{"mkfs", "--size", "96M", "--ftl", spec, "--ftl-trace", trace, img}, &out, &errb); code != 0 {
		t.Fatalf("mkfs: %d %s", code, errb.String())
	}
	// A later "mount" appends to the trace.
	d, ok, err := ftl.Open(img, false, nil)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	dev, err := traceDevice(d, trace, func(s string) { t.Error(s) })
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range int64(200) {
		if err := dev.WriteAt(buf[:4096*(1+i%64)], (i*7919%(dev.Size()>>20-1))<<20, uint32(i%5)); err != nil {
			t.Fatal(err)
		}
	}
	live, _ := d.FDPStats()
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if live.MediaBytesWritten <= live.HostBytesWritten {
		t.Fatalf("no GC copies on a preconditioned drive: %+v", live)
	}
	out.Reset()
	if code := Main([]string{"waf", "replay", "--ftl", spec, "--json", "--plot", filepath.Join(dir, "p.png"), trace}, &out, &errb); code != 0 {
		t.Fatalf("replay: %d %s", code, errb.String())
	}
	var res ftl.ReplayResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Host != live.HostBytesWritten || res.Media != live.MediaBytesWritten || res.Erased != live.MediaBytesErased {
		t.Fatalf("replay %d/%d/%d, mkfs left %d/%d/%d", res.Host, res.Media, res.Erased,
			live.HostBytesWritten, live.MediaBytesWritten, live.MediaBytesErased)
	}
	if st, err := os.Stat(filepath.Join(dir, "p.png")); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
	for _, bad := range [][]string{
		{"waf", "replay", "--ftl", "op=200", trace},
		{"waf", "replay", "--map", "1:99", trace},
		{"waf", "replay", "--trim-every", "x", trace},
		{"waf", "replay"},
	} {
		if code := Main(bad, &out, &errb); code != exitUsage {
			t.Errorf("%q: exit %d, want usage", bad, code)
		}
	}
	if code := Main([]string{"waf", "replay", img}, &out, &errb); code != exitFail {
		t.Errorf("replay of an image: exit %d", code)
	}
}

// The help of mkfs and mount describes the model's keys and options.
func TestHelpDescribesFTL(t *testing.T) {
	for cmd, words := range map[string][]string{
		"mkfs":  {"--ftl SPEC", "bg=", "bg_invalid=", "fg=", "preopen=", "precondition=", "isolation=", "--ftl-trace"},
		"mount": {"ftl_trace=FILE", "stream_rules=", "backend=ftl"},
		"waf":   {"--no-discard", "--trim-every", "--map"},
	} {
		var out, errb bytes.Buffer
		if code := Main([]string{"help", cmd}, &out, &errb); code != 0 {
			t.Fatalf("help %s: %d", cmd, code)
		}
		for _, w := range words {
			if !strings.Contains(out.String(), w) {
				t.Errorf("help %s does not mention %q", cmd, w)
			}
		}
	}
}

// The filesystem's metadata reaches a modelled drive on a handle of its own
// (the last) with meta=last, and with unstreamed data on the first with
// meta=shared.
func TestMetadataHandle(t *testing.T) {
	for meta, want := range map[string]int{"last": 3, "shared": 0} {
		img := filepath.Join(t.TempDir(), "img")
		var out, errb bytes.Buffer
		if code := Main([]string{"mkfs", "--size", "96M", "--ftl", "op=14,ru=256K,handles=4,meta=" + meta, img}, &out, &errb); code != 0 {
			t.Fatalf("mkfs: %d %s", code, errb.String())
		}
		d, _, err := ftl.Open(img, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := d.FDPStats()
		d.Close()
		for h, hs := range st.Handles {
			if (h == want) != (hs.HostBytes > 0) {
				t.Errorf("meta=%s: mkfs wrote %d bytes through handle %d; want all metadata on handle %d", meta, hs.HostBytes, h+1, want+1)
			}
		}
	}
}

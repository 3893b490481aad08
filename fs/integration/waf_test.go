package integration

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamfs/streamfs/backend/ftl"
)

// fdpDoc is the part of `streamfs stats --json` this test reads.
type fdpDoc struct {
	Backend string `json:"backend"`
	Streams []struct {
		Stream   uint32 `json:"stream"`
		Files    uint64 `json:"files"`
		FromSet  uint64 `json:"files_stream_set"`
		FromDir  uint64 `json:"files_stream_directory"`
		FromRule uint64 `json:"files_stream_rule"`
	} `json:"streams"`
	FDP *struct {
		Host    uint64  `json:"host_bytes_written"`
		Media   uint64  `json:"media_bytes_written"`
		Erased  uint64  `json:"media_bytes_erased"`
		WAF     float64 `json:"waf"`
		Handles []struct {
			Stream uint32  `json:"stream"`
			Host   uint64  `json:"host_bytes_written"`
			Media  uint64  `json:"media_bytes_written"`
			WAF    float64 `json:"waf"`
		} `json:"handles"`
	} `json:"fdp"`
	FDPError string `json:"fdp_error"`
}

func readStats(t *testing.T, mnt string) fdpDoc {
	t.Helper()
	var d fdpDoc
	if err := json.Unmarshal([]byte(streamfs(t, "stats", "--json", mnt)), &d); err != nil {
		t.Fatal(err)
	}
	if d.FDP == nil {
		t.Fatalf("stats has no fdp object (backend %s, error %q)", d.Backend, d.FDPError)
	}
	return d
}

// TestFTLModelMounted runs the FDP SSD model under a mounted streamfs: the
// image carries the model, streams reach its handles, stream rules place
// files by name, a cold stream written once keeps a WAF of 1 while a hot
// one is overwritten, and the counters survive a remount.
func TestFTLModelMounted(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "256M", "--ftl", "op=14,ru=1M,handles=4")
	if out := streamfs(t, "info", img); !strings.Contains(out, "op=14,ru=1M,handles=4,gc=greedy,isolation=initial") {
		t.Fatalf("info does not show the model:\n%s", out)
	}
	m := mountImage(t, img, "stream_rules=*.log:1;*.sst:2")
	if out := streamfs(t, "stream", "max", m.dir); !hasLine(out, "Max streams supported: 4") {
		t.Fatalf("stream max: %s", out)
	}

	// Where streams come from: rule over directory, SET over rule.
	cold := m.path("cold")
	if err := os.Mkdir(cold, 0o755); err != nil {
		t.Fatal(err)
	}
	streamfs(t, "stream", "set", cold, "3")
	writeFile(t, m.path("a.log"), []byte("wal"), 0o644)
	writeFile(t, cold+"/b.log", []byte("wal"), 0o644)
	writeFile(t, cold+"/c.dat", []byte("data"), 0o644)
	writeFile(t, m.path("d.dat"), []byte("data"), 0o644)
	for path, want := range map[string][2]string{
		m.path("a.log"): {"1", "rule"}, cold + "/b.log": {"1", "rule"},
		cold + "/c.dat": {"3", "directory"}, m.path("d.dat"): {"0", "none"},
		cold: {"3", "set"}, m.dir: {"0", "none"},
	} {
		out := streamfs(t, "stream", "get", path)
		if !hasLine(out, "Current stream ID: "+want[0]) || !hasLine(out, "Stream source: "+want[1]) {
			t.Errorf("%s: %s", path, out)
		}
	}
	streamfs(t, "stream", "set", m.path("a.log"), "4")
	if out := streamfs(t, "stream", "get", m.path("a.log")); !hasLine(out, "Stream source: set") {
		t.Errorf("after SET: %s", out)
	}

	// Cold data once through stream 3, a hot file rewritten at random
	// through stream 2 (by rule).
	const size = 64 << 20
	writeFile(t, cold+"/cold.dat", randBytes(1, size), 0o644)
	hot := m.path("hot.sst")
	writeFile(t, hot, randBytes(2, size), 0o644)
	f, err := os.OpenFile(hot, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	page := randBytes(4, 4096)
	for range 3 * size / 4096 {
		if _, err := f.WriteAt(page, rng.Int63n(size/4096)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	streamfs(t, "stats", "--interval", "0.1", "--count", "1", m.dir)

	s := readStats(t, m.dir)
	h := s.FDP.Handles
	if len(h) != 4 {
		t.Fatalf("%d handles, want 4", len(h))
	}
	t.Logf("drive WAF %.3f (host %d MiB, media %d MiB, erased %d MiB); handle WAFs %.3f %.3f %.3f %.3f",
		s.FDP.WAF, s.FDP.Host>>20, s.FDP.Media>>20, s.FDP.Erased>>20, h[0].WAF, h[1].WAF, h[2].WAF, h[3].WAF)
	if h[2].Host < size || h[1].Host < 4*size {
		t.Fatalf("streams did not reach their handles: %+v", h)
	}
	if h[2].WAF > 1.05 {
		t.Errorf("cold stream 3: WAF %.3f, want about 1", h[2].WAF)
	}
	if s.FDP.Erased == 0 || h[1].WAF <= 1 {
		t.Errorf("the hot stream never caused GC: erased %d, WAF %.3f", s.FDP.Erased, h[1].WAF)
	}
	for _, st := range s.Streams {
		if st.Stream == 1 && st.FromRule != 1 {
			t.Errorf("stream 1: %d files by rule, want 1 (b.log)", st.FromRule)
		}
	}

	m = m.remount(t)
	if s2 := readStats(t, m.dir); s2.FDP.Host < s.FDP.Host || s2.FDP.Media < s.FDP.Media {
		t.Fatalf("counters after remount: host %d media %d, before %d %d", s2.FDP.Host, s2.FDP.Media, s.FDP.Host, s.FDP.Media)
	}
	if out := streamfs(t, "stream", "get", cold+"/c.dat"); !hasLine(out, "Stream source: directory") {
		t.Errorf("stream source after remount: %s", out)
	}
}

// Invalid rules stop the mount with one clear line.
func TestStreamRulesRejected(t *testing.T) {
	requireEnv(t)
	img := mkfs(t, "64M")
	for opt, want := range map[string]string{
		"stream_rules=*.log:0":               "want a stream id from 1",
		"stream_rules=*.log":                 "want PATTERN:STREAM",
		"stream_rules=[x:1":                  "syntax error in pattern",
		"stream_rules=*.log:99":              "above this filesystem's 4 streams (valid stream IDs: 1 to 4)",
		"stream_rules_file=/nonexistent/rls": "no such file",
		"stream_rules=*.log:1,*.sst:2":       "separate stream rules with ';'",
	} {
		dir := t.TempDir()
		m := startMount(t, img, dir, []string{opt})
		select {
		case <-m.exited:
		case <-time.After(hangGuard):
			m.stop(t)
			t.Fatalf("-o %s: mounted", opt)
		}
		m.stopped = true
		if m.waitErr == nil || !strings.Contains(m.log.String(), want) {
			t.Errorf("-o %s: exit %v, output %q, want %q", opt, m.waitErr, m.log.String(), want)
		}
		// Refused before mounting, said once.
		if out := m.log.String(); strings.Contains(out, "mounted") || strings.Contains(out, "bad stream rule") {
			t.Errorf("-o %s: output %q: want the refusal alone, before mounting", opt, out)
		}
		if isMounted(dir) {
			_, _ = tryCmd("umount", "-l", dir)
		}
	}
}

// A geometry the drive cannot hold is refused by mkfs in one line.
func TestFTLBadGeometry(t *testing.T) {
	requireEnv(t)
	img := t.TempDir() + "/img"
	for spec, want := range map[string]string{
		"op=7,ru=8M,handles=8": "spare reclaim units",
		"op=0":                 "want a percentage",
		"gc=lru":               "want greedy or cost-benefit",
	} {
		_, stderr, err := tryCmdSplit(streamfsBin, "mkfs", "--size", "64M", "--ftl", spec, img)
		if err == nil {
			t.Errorf("--ftl %s: accepted", spec)
			continue
		}
		if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; !strings.Contains(stderr, want) || lines != 1 {
			t.Errorf("--ftl %s: stderr %q, want one line with %q", spec, stderr, want)
		}
	}
}

// A live run through a real mount — mkfs with preconditioning (a full drive,
// so GC copies), streams by directory, deletes reaching the drive through
// one fstrim, a remount in the middle — recorded with mkfs --ftl-trace and -o ftl_trace, replayed by
// `streamfs waf replay` on the same drive: exactly the counters the model
// saved at the last unmount, per handle too.
func TestFTLTraceReplayExact(t *testing.T) {
	requireEnv(t)
	const spec = "op=7,ru=1M,handles=4,precondition=seq"
	trace := filepath.Join(t.TempDir(), "trace")
	img := mkfs(t, "256M", "--ftl", spec, "--ftl-trace", trace)
	m := mountImage(t, img, "ftl_trace="+trace)
	for round := range 2 {
		for i, dir := range []string{"hot", "cold"} {
			d := m.path(dir)
			if round == 0 {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
				streamfs(t, "stream", "set", d, []string{"2", "3"}[i])
			}
			for f := range 4 {
				writeFile(t, filepath.Join(d, string(rune('a'+f))), randBytes(int64(10*round+f), 6<<20), 0o644)
			}
			if err := os.Remove(filepath.Join(d, "b")); err != nil {
				t.Fatal(err)
			}
		}
		rng := rand.New(rand.NewSource(int64(round)))
		page := randBytes(9, 4096)
		for _, name := range []string{"a", "c", "d"} {
			hot, err := os.OpenFile(m.path("hot", name), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			for range 4000 {
				if _, err := hot.WriteAt(page, rng.Int63n(6<<20/4096)*4096); err != nil {
					t.Fatal(err)
				}
			}
			if err := hot.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if round == 0 {
			runCmd(t, "fstrim", m.dir)
			m = m.remount(t)
		}
	}
	m.unmount(t)

	d, ok, err := ftl.Open(img, true, nil)
	if err != nil || !ok {
		t.Fatalf("open the model: %v %v", ok, err)
	}
	live, _ := d.FDPStats()
	d.Close()
	var res ftl.ReplayResult
	if err := json.Unmarshal([]byte(streamfs(t, "waf", "replay", "--ftl", spec, "--json", trace)), &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("live host %d media %d erased %d; replay %d %d %d over %d records",
		live.HostBytesWritten, live.MediaBytesWritten, live.MediaBytesErased, res.Host, res.Media, res.Erased, res.Records)
	if res.Host != live.HostBytesWritten || res.Media != live.MediaBytesWritten || res.Erased != live.MediaBytesErased {
		t.Fatalf("replay differs from the live run")
	}
	for i, h := range res.Handles {
		if h.Host != live.Handles[i].HostBytes || h.Media != live.Handles[i].MediaBytes {
			t.Errorf("handle %d: replay %d/%d, live %d/%d", i+1, h.Host, h.Media, live.Handles[i].HostBytes, live.Handles[i].MediaBytes)
		}
	}
	if live.MediaBytesWritten == live.HostBytesWritten || live.Handles[3].HostBytes == 0 {
		t.Errorf("no GC copies or no metadata on handle 4: the run proves little (%+v)", live)
	}
}

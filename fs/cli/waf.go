package cli

import (
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/ftl"
)

// wafHelp is `streamfs help waf`, after the synopsis.
const wafHelp = `Replays a trace recorded with mount -o ftl_trace=FILE (and mkfs --ftl-trace)
into a fresh model of the drive SPEC describes (the keys of streamfs help
mkfs) and prints its write amplification: whole run, per handle and per
interval of host writes. A replay of a modelled drive's trace on the same
SPEC gives exactly the counters the live run had.
  --ftl SPEC          the drive to model (default: the model's defaults)
  --no-discard        drop every discard, as a mount without discard
  --trim-every SIZE   hold discards back and trim them in one batch every
                      SIZE of host writes, as a periodic fstrim
  --map S:H,...       send stream S (meta: the metadata) to handle H (1-based)
                      instead of H = S
  --interval SIZE     one row per SIZE of host writes (default: 1/20 of the run)
  --json              print the result as JSON
  --plot FILE.png     draw the interval WAF, whole drive and per handle
`

func init() {
	commands["waf"] = Waf
}

// traceDevice records dev's commands to path (mount -o ftl_trace, mkfs
// --ftl-trace); warn hears when the recording stops.
func traceDevice(dev backend.Device, path string, warn func(string)) (backend.Device, error) {
	tw, err := ftl.CreateTrace(path, ftl.TraceHeader{Size: dev.Size(), Handles: int(dev.MaxStreams()), Kind: dev.Kind()})
	if err != nil {
		dev.Close()
		return nil, err
	}
	tw.SetWarn(warn)
	return ftl.Traced(dev, tw), nil
}

// Waf implements `streamfs waf replay`.
func Waf(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "replay" {
		fmt.Fprint(stderr, wafHelp)
		return exitUsage
	}
	f := newFlags("waf replay", stderr)
	spec := f.String("ftl", "", "drive to model")
	noDiscard := f.Bool("no-discard", false, "drop every discard")
	trimEvery := f.String("trim-every", "", "batch discards every SIZE of host writes")
	mapSpec := f.String("map", "", "STREAM:HANDLE,...")
	intervalS := f.String("interval", "", "host bytes per interval row")
	asJSON := f.Bool("json", false, "print JSON")
	plotFile := f.String("plot", "", "PNG file for the interval WAF")
	pos, err := parseFlags(f, args[1:])
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprint(stderr, wafHelp)
		return exitUsage
	}
	usage := func(err error) int {
		fmt.Fprintf(stderr, "streamfs waf replay: %v\n", err)
		return exitUsage
	}
	g, err := ftl.ParseGeometry(*spec)
	if err != nil {
		return usage(fmt.Errorf("--ftl: %w", err))
	}
	var o ftl.ReplayOptions
	o.NoDiscard = *noDiscard
	if *trimEvery != "" {
		if o.TrimEvery, err = backend.ParseSize(*trimEvery); err != nil || o.TrimEvery <= 0 {
			return usage(fmt.Errorf("--trim-every %s: want a size (K, M, G suffixes)", *trimEvery))
		}
		if o.NoDiscard {
			return usage(fmt.Errorf("--trim-every and --no-discard exclude each other"))
		}
	}
	if *mapSpec != "" {
		o.Map = map[uint32]int{}
		for _, kv := range strings.Split(*mapSpec, ",") {
			s, h, ok := strings.Cut(kv, ":")
			sn, err1 := strconv.ParseUint(s, 10, 32)
			if s == "meta" {
				sn, err1 = uint64(backend.StreamMeta), nil
			}
			hn, err2 := strconv.Atoi(h)
			if !ok || err1 != nil || err2 != nil || hn < 1 || hn > g.Handles {
				return usage(fmt.Errorf("--map %s: want STREAM:HANDLE with a handle from 1 to %d", kv, g.Handles))
			}
			o.Map[uint32(sn)] = hn - 1
		}
	}
	tf, err := os.Open(pos[0])
	if err != nil {
		return fail(stderr, "waf replay", err)
	}
	defer tf.Close()
	tr, err := ftl.OpenTrace(tf)
	if err != nil {
		return fail(stderr, "waf replay", fmt.Errorf("%s: %w", pos[0], err))
	}
	if *intervalS != "" {
		if o.Interval, err = backend.ParseSize(*intervalS); err != nil || o.Interval <= 0 {
			return usage(fmt.Errorf("--interval %s: want a size (K, M, G suffixes)", *intervalS))
		}
	} else {
		o.Interval = max(1<<20, tr.WriteBytes/20)
	}
	res, err := ftl.Replay(tr, g, o)
	if err != nil {
		return fail(stderr, "waf replay", err)
	}
	if *plotFile != "" {
		if err := plotIntervals(*plotFile, res); err != nil {
			return fail(stderr, "waf replay", err)
		}
	}
	if *asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return fail(stderr, "waf replay", err)
		}
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	fmt.Fprintf(stdout, "ftl %s, %d MiB logical, %d records (recorded on %s)\n", res.Spec, res.Logical>>20, res.Records, tr.Header.Kind)
	fmt.Fprintf(stdout, "host_bytes_written=%d media_bytes_written=%d media_bytes_erased=%d waf=%.3f\n", res.Host, res.Media, res.Erased, res.WAF)
	fmt.Fprintf(stdout, "%6s %16s %16s %7s\n", "HANDLE", "HOST-BYTES", "MEDIA-BYTES", "WAF")
	for _, h := range res.Handles {
		if h.Host > 0 || h.Media > 0 {
			fmt.Fprintf(stdout, "%6d %16d %16d %7.3f\n", h.Handle, h.Host, h.Media, h.WAF)
		}
	}
	fmt.Fprintf(stdout, "%14s %8s  %s\n", "HOST-END", "WAF", "HANDLE WAF (interval)")
	for _, iv := range res.Intervals {
		line := fmt.Sprintf("%14d %8.3f ", iv.HostEnd, iv.WAF)
		for h, w := range iv.Handles {
			if w > 0 {
				line += fmt.Sprintf(" h%d=%.3f", h+1, w)
			}
		}
		fmt.Fprintln(stdout, line)
	}
	return exitOK
}

// plotIntervals draws the interval WAF against host bytes: the drive in
// black, each handle with writes in a colour of its own, on a grid of one
// line per 0.5 of WAF (no text: the standard library has no fonts).
func plotIntervals(path string, res ftl.ReplayResult) error {
	const w, h, pad = 900, 500, 20
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	if len(res.Intervals) == 0 {
		return writePNG(path, img)
	}
	top := 1.0
	for _, iv := range res.Intervals {
		top = max(top, iv.WAF)
		for _, x := range iv.Handles {
			top = max(top, x)
		}
	}
	top = math.Ceil(top*2) / 2
	ymap := func(v float64) int { return h - pad - int(v/top*float64(h-2*pad)) }
	xmap := func(host uint64) int { return pad + int(float64(host)/float64(res.Host)*float64(w-2*pad)) }
	grid := color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	for v := 0.0; v <= top; v += 0.5 {
		for x := pad; x < w-pad; x++ {
			img.Set(x, ymap(v), grid)
		}
	}
	palette := []color.RGBA{{0xc0, 0x39, 0x2b, 0xff}, {0xd6, 0x89, 0x10, 0xff}, {0x24, 0x71, 0xa3, 0xff},
		{0x22, 0x99, 0x54, 0xff}, {0x88, 0x4e, 0xa0, 0xff}, {0x17, 0xa5, 0x89, 0xff}, {0x7f, 0x8c, 0x8d, 0xff}}
	line := func(get func(ftl.IntervalStat) float64, c color.RGBA) {
		px, py := -1, -1
		for _, iv := range res.Intervals {
			v := get(iv)
			if v <= 0 {
				px = -1
				continue
			}
			x, y := xmap(iv.HostEnd), ymap(v)
			if px >= 0 {
				drawLine(img, px, py, x, y, c)
			}
			px, py = x, y
		}
	}
	for hd := range res.Intervals[0].Handles {
		line(func(iv ftl.IntervalStat) float64 { return iv.Handles[hd] }, palette[hd%len(palette)])
	}
	line(func(iv ftl.IntervalStat) float64 { return iv.WAF }, color.RGBA{0, 0, 0, 0xff})
	return writePNG(path, img)
}

func drawLine(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	n := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= n; i++ {
		x := x0 + (x1-x0)*i/n
		y := y0 + (y1-y0)*i/n
		img.Set(x, y, c)
		img.Set(x, y+1, c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	sfs "github.com/streamfs/streamfs/fs"
	"github.com/streamfs/streamfs/fs/meta"
	"github.com/streamfs/streamfs/fs/rules"
	"github.com/streamfs/streamfs/ioctl"
)

// mountOpts are the parsed -o options; the README has the table.
type mountOpts struct {
	ro, allowOther, debug, discard bool
	acl                            bool // POSIX ACLs kept and enforced
	placement                      alloc.Policy
	cache                          bool
	backend                        string
	cacheBytes                     int64
	commit                         time.Duration
	logFile                        string
	logJSON                        bool
	noSuid, noDev, noExec          bool
	atime                          sfs.AtimeMode
	noRecovery                     bool
	remount                        bool
	rules                          *rules.Set // stream_rules, then stream_rules_file
	optRules, fileRules            *rules.Set // while parsing
	ftlTrace                       string     // ftl_trace: record the device's commands here
	metaDev                        string     // metadev: the metadata device beside a zoned one
	uring                          sfs.UringMode
}

// genericOpts are mount(8) options that mean nothing to streamfs; the mount
// helper passes them and they are ignored.
var genericOpts = map[string]bool{
	"auto": true, "noauto": true, "user": true, "nouser": true, "users": true, "defaults": true,
	"_netdev": true, "nofail": true, "nodiratime": true, "diratime": true, "async": true, "sync": true,
	"lazytime": true, "nolazytime": true, "owner": true, "group": true, "default_permissions": true,
	"fsname": true, "subtype": true,
	// The FUSE kernel options mount(8) passes back from mtab on a remount.
	"user_id": true, "group_id": true, "max_read": true, "rootmode": true, "blksize": true,
}

// mountOption is one -o option. The parser and `streamfs mount --help` both
// read mountOptions, so the help cannot miss an option the parser takes.
type mountOption struct {
	names []string // spellings; each takes a value when arg is set
	arg   string   // the value's syntax in help ("on|off"); "" for a flag
	help  string   // one line, the default in parentheses
	set   func(o *mountOpts, name, v string) error
}

// mountOptions is the -o table, in help order.
var mountOptions = []mountOption{
	{names: []string{"ro", "rw"}, help: "read-only or read-write (rw)",
		set: func(o *mountOpts, k, _ string) error { o.ro = k == "ro"; return nil }},
	{names: []string{"norecovery"}, help: "with ro: do not replay the journal (as XFS); such a mount cannot be remounted rw",
		set: func(o *mountOpts, _, _ string) error { o.noRecovery = true; return nil }},
	{names: []string{"remount"}, help: "change a mounted filesystem's ro/rw, suid, dev, exec and atime options (mount -o remount,...); rw of a filesystem mounted ro reopens its device read-write and checkpoints what the mount replayed, refused for norecovery or a write-protected device",
		set: func(o *mountOpts, _, _ string) error { o.remount = true; return nil }},
	{names: []string{"suid", "nosuid"}, help: "honour set-id bits (suid)",
		set: func(o *mountOpts, k, _ string) error { o.noSuid = k == "nosuid"; return nil }},
	{names: []string{"dev", "nodev"}, help: "allow device nodes (dev)",
		set: func(o *mountOpts, k, _ string) error { o.noDev = k == "nodev"; return nil }},
	{names: []string{"exec", "noexec"}, help: "allow execution (exec)",
		set: func(o *mountOpts, k, _ string) error { o.noExec = k == "noexec"; return nil }},
	{names: []string{"relatime", "atime", "strictatime", "noatime"}, help: "access-time updates; atime is relatime (relatime)",
		set: func(o *mountOpts, k, _ string) error {
			switch k {
			case "strictatime":
				o.atime = sfs.AtimeStrict
			case "noatime":
				o.atime = sfs.AtimeNone
			default:
				o.atime = sfs.AtimeRelative
			}
			return nil
		}},
	{names: []string{"placement"}, arg: "streams|agset|inode", help: "data placement policy (streams)",
		set: func(o *mountOpts, _, v string) error {
			p, err := alloc.ParsePolicy(v)
			if err != nil {
				return fmt.Errorf("-o placement=%s: want inode, agset or streams", v)
			}
			o.placement = p
			return nil
		}},
	{names: []string{"uring"}, arg: "auto|on|off", help: "FUSE requests over io_uring: auto uses it when the kernel offers it (" + sfs.UringParamHint + ") (auto)",
		set: func(o *mountOpts, _, v string) error {
			m, err := sfs.ParseUringMode(v)
			if err != nil {
				return fmt.Errorf("-o %w", err)
			}
			o.uring = m
			return nil
		}},
	{names: []string{"placement_cache"}, arg: "on|off", help: "per-inode placement cache (on)",
		set: func(o *mountOpts, _, v string) error {
			if v != "on" && v != "off" {
				return fmt.Errorf("-o placement_cache=%s: want on or off", v)
			}
			o.cache = v == "on"
			return nil
		}},
	{names: []string{"backend"}, arg: "file|block|nvme|zns|ftl|zoned", help: "force a backend (by what PATH is; nvme: an FDP namespace, zns: a zoned namespace, ftl: the image's modelled FDP SSD, zoned: an emulated zoned image)",
		set: func(o *mountOpts, _, v string) error {
			switch v {
			case "file", "block", "nvme", "zns", "ftl", "zoned":
			default:
				return fmt.Errorf("-o backend=%s: want file, block, nvme, zns, ftl or zoned", v)
			}
			o.backend = v
			return nil
		}},
	{names: []string{"metadev"}, arg: "METADEV", help: "the metadata device of a filesystem made with mkfs --metadev: PATH is then the zoned device with its file data",
		set: func(o *mountOpts, k, v string) error { return absOpt(&o.metaDev, k, v) }},
	{names: []string{"ftl_trace"}, arg: "FILE", help: "record every write, discard and flush the device gets, with stream and handle, for streamfs waf replay (appends to a trace of the same device)",
		set: func(o *mountOpts, k, v string) error { return absOpt(&o.ftlTrace, k, v) }},
	{names: []string{"discard", "nodiscard"}, help: "discard freed blocks once their free is durable (nodiscard)",
		set: func(o *mountOpts, k, _ string) error { o.discard = k == "discard"; return nil }},
	{names: []string{"errors"}, arg: "shutdown|remount-ro", help: "a failed metadata write shuts the filesystem down, as XFS; remount-ro is a synonym (shutdown)",
		set: func(o *mountOpts, _, v string) error {
			// Retrying could build on a metadata write that half landed.
			if v != "shutdown" && v != "remount-ro" {
				return fmt.Errorf("-o errors=%s: only errors=shutdown (or its synonym remount-ro) is supported: a failed metadata write shuts the filesystem down", v)
			}
			return nil
		}},
	{names: []string{"cache_size"}, arg: "SIZE", help: "bound of the metadata node cache, K, M, G suffixes (256M)",
		set: func(o *mountOpts, _, v string) error {
			n, err := backend.ParseSize(v)
			if err != nil || n < 1<<20 {
				return fmt.Errorf("-o cache_size=%s: want a size of at least 1M (K, M, G suffixes)", v)
			}
			o.cacheBytes = n
			return nil
		}},
	{names: []string{"commit"}, arg: "SECONDS", help: "periodic journal commit, 1..3600 (5)",
		set: func(o *mountOpts, _, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 3600 {
				return fmt.Errorf("-o commit=%s: want seconds from 1 to 3600", v)
			}
			o.commit = time.Duration(n) * time.Second
			return nil
		}},
	{names: []string{"stream_rules"}, arg: "PATTERN:ID;...", help: "streams for new files by name, rules separated by ';' (quote the option)",
		set: func(o *mountOpts, _, v string) error {
			// ';' because mount(8) splits options at ','.
			set, err := rules.Parse(v, "-o stream_rules")
			if err != nil {
				return err
			}
			o.optRules = o.optRules.Append(set)
			return nil
		}},
	{names: []string{"stream_rules_file"}, arg: "FILE", help: "stream rules, one PATTERN:ID a line, tried after stream_rules",
		set: func(o *mountOpts, _, v string) error {
			set, err := rules.ParseFile(v)
			if err != nil {
				return fmt.Errorf("-o stream_rules_file: %w", err)
			}
			o.fileRules = o.fileRules.Append(set)
			return nil
		}},
	{names: []string{"acl", "noacl"}, help: "POSIX ACLs, kept and enforced by the kernel; noacl answers EOPNOTSUPP for them, and ls -l asks nothing per file (noacl)",
		set: func(o *mountOpts, name, _ string) error { o.acl = name == "acl"; return nil }},
	{names: []string{"allow_other"}, help: "let other users access the mount",
		set: func(o *mountOpts, _, _ string) error { o.allowOther = true; return nil }},
	{names: []string{"debug"}, help: "log FUSE requests and placement decisions",
		set: func(o *mountOpts, _, _ string) error { o.debug = true; return nil }},
	{names: []string{"log"}, arg: "FILE", help: "log to FILE instead of stderr (syslog in the background)",
		set: func(o *mountOpts, _, v string) error { o.logFile = v; return nil }},
	{names: []string{"log_format"}, arg: "text|json", help: "log lines as text or one JSON object each (text)",
		set: func(o *mountOpts, _, v string) error {
			if v != "text" && v != "json" {
				return fmt.Errorf("-o log_format=%s: want text or json", v)
			}
			o.logJSON = v == "json"
			return nil
		}},
}

// absOpt sets *dst to the path option k=v made absolute: the background
// daemon does not keep the caller's working directory.
func absOpt(dst *string, k, v string) error {
	abs, err := filepath.Abs(v)
	if err != nil {
		return fmt.Errorf("-o %s=%s: %w", k, v, err)
	}
	*dst = abs
	return nil
}

// findMountOption returns the table entry spelled k.
func findMountOption(k string) *mountOption {
	for i := range mountOptions {
		for _, n := range mountOptions[i].names {
			if n == k {
				return &mountOptions[i]
			}
		}
	}
	return nil
}

func parseMountOpts(list []string) (mountOpts, error) {
	o := mountOpts{placement: alloc.PolicyStreams, cache: true, commit: 5 * time.Second}
	sawRules := false
	for _, group := range list {
		for _, opt := range strings.Split(group, ",") {
			if opt == "" {
				continue
			}
			k, v, hasV := strings.Cut(opt, "=")
			mo := findMountOption(k)
			switch {
			case mo != nil && (mo.arg != "") == hasV:
				if err := mo.set(&o, k, v); err != nil {
					return o, err
				}
				sawRules = sawRules || k == "stream_rules"
			case mo != nil && hasV:
				return o, fmt.Errorf("-o %s takes no value", k)
			case mo != nil:
				return o, fmt.Errorf("-o %s needs a value: %s=%s", k, k, mo.arg)
			case genericOpts[k] || strings.HasPrefix(k, "x-"):
				// generic mount(8) option: ignored
			case sawRules && strings.Contains(opt, ":"):
				// mount(8) and this parser split options at ','.
				return o, fmt.Errorf("unknown mount option %q: separate stream rules with ';', not ',' (-o 'stream_rules=*.log:1;*.sst:2')", opt)
			default:
				return o, fmt.Errorf("unknown mount option %q (see streamfs help mount)", opt)
			}
		}
	}
	o.rules = o.optRules.Append(o.fileRules)
	return o, nil
}

// mountHelp is `streamfs mount --help`, built from mountOptions.
var mountHelp = buildMountHelp()

func buildMountHelp() string {
	var b strings.Builder
	b.WriteString("usage: streamfs " + synopsis["mount"] + `
Mounts the device or image PATH on MOUNTPOINT and serves it in the
foreground until unmounted (umount MOUNTPOINT, or Ctrl-C / SIGTERM).
mount -t fuse.streamfs PATH MOUNTPOINT -o OPTIONS does the same in the background.

-o options (comma-separated):
`)
	for _, mo := range mountOptions {
		left := strings.Join(mo.names, ", ")
		if mo.arg != "" {
			left = mo.names[0] + "=" + mo.arg
		}
		writeOptionLine(&b, left, mo.help)
	}
	var generic []string
	for k := range genericOpts {
		generic = append(generic, k)
	}
	sort.Strings(generic)
	b.WriteString(wrap("Generic mount(8) options, accepted and ignored: "+strings.Join(generic, ", ")+", x-*.", 78, ""))
	return b.String()
}

// writeOptionLine writes one option of a help listing: the option in a
// column of 28, its text wrapped beside it.
func writeOptionLine(b *strings.Builder, left, help string) {
	const col = 28
	pad := strings.Repeat(" ", col)
	line := "  " + left
	if len(line) >= col-1 {
		b.WriteString(line + "\n")
		line = ""
	}
	text := wrap(help, 78-col, pad)
	b.WriteString(line + strings.Repeat(" ", max(0, col-len(line))) + strings.TrimPrefix(text, pad))
}

// wrap breaks s into lines of at most width characters, each line after
// the first starting with indent, and ends it with a newline.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(s) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	b.WriteString("\n")
	return b.String()
}

// MountCmd implements `streamfs mount [-o OPTIONS] PATH MOUNTPOINT`, in the
// foreground.
func MountCmd(args []string, stdout, stderr io.Writer) int {
	opts, pos, flags := splitMountArgs(args)
	for _, a := range flags {
		if a == "-h" || a == "--help" {
			fmt.Fprint(stdout, mountHelp)
			return exitOK
		}
		fmt.Fprintf(stderr, "streamfs mount: unknown flag %s\n", a)
		return exitUsage
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, usageLine("mount"))
		return exitUsage
	}
	o, err := parseMountOpts(opts)
	if err != nil {
		fmt.Fprintf(stderr, "streamfs mount: %v\n", err)
		return exitUsage
	}
	if o.remount {
		if err := remount(pos[1], o); err != nil {
			return fail(stderr, "mount", fmt.Errorf("remount %s: %w", pos[1], err))
		}
		return exitOK
	}
	if o.noRecovery && !o.ro {
		fmt.Fprintln(stderr, "streamfs mount: -o norecovery needs -o ro")
		return exitUsage
	}
	if err := runMount(pos[0], pos[1], o, stderr, nil); err != nil {
		return fail(stderr, "mount", err)
	}
	return exitOK
}

// splitMountArgs separates -o option groups (anywhere on the line, as
// mount(8) passes them), other flags and positional arguments.
func splitMountArgs(args []string) (opts, pos, flags []string) {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" && i+1 < len(args):
			opts = append(opts, args[i+1])
			i++
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			opts = append(opts, a[2:])
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
		default:
			pos = append(pos, a)
		}
	}
	return opts, pos, flags
}

// checkMountpoint refuses anything but an empty directory and explains a
// dead mount left by a crashed daemon.
func checkMountpoint(mnt string) error {
	// stat may still answer from the kernel's attribute cache on a dead
	// mount; open or readdir then give ENOTCONN (ECONNABORTED while the
	// kernel tears down the rings of a daemon that served over io_uring).
	dead := deadMountErr
	deadErr := fmt.Errorf("%s is a dead FUSE mount (its daemon died); clear it with: umount -l %s", mnt, mnt)
	st, err := os.Stat(mnt)
	if dead(err) {
		return deadErr
	}
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mount point %s is not a directory", mnt)
	}
	d, err := os.Open(mnt)
	if dead(err) {
		return deadErr
	}
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if dead(err) {
		return deadErr
	}
	if len(names) > 0 {
		return fmt.Errorf("mount point %s is not an empty directory", mnt)
	}
	return nil
}

// runMount mounts and serves until unmounted or signalled. ready, if not
// nil, is called once the mount is up (or with the error that prevented it).
func runMount(path, mnt string, o mountOpts, stderr io.Writer, ready func(error)) (err error) {
	if ready != nil {
		defer func() {
			if err != nil {
				ready(err)
			}
		}()
	}
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("-o log=%s: %w", o.logFile, err)
		}
		defer f.Close()
		stderr = f
	}
	log := newLoggerFormat(stderr, o.debug, o.logJSON)
	defer func() { _ = log.Sync() }()
	// STREAMFS_CPUPROFILE=FILE profiles the daemon for benchmarks.
	if p := os.Getenv("STREAMFS_CPUPROFILE"); p != "" {
		if f, perr := os.Create(p); perr == nil {
			if perr = pprof.StartCPUProfile(f); perr == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	// STREAMFS_MEMPROFILE=FILE: a heap profile is written to FILE each time
	// the daemon gets SIGUSR1 (what the kernel's cached inodes cost).
	if p := os.Getenv("STREAMFS_MEMPROFILE"); p != "" {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
		go func() {
			for range usr1 {
				if err := writeHeapProfile(p); err != nil {
					log.Warn("heap profile", zap.Error(err))
				}
			}
		}()
	}
	// A write-protected device opens read-write all the same and only its
	// writes fail, which would shut the filesystem down at the first
	// commit: mount it read-only instead, as the kernel does.
	for _, p := range []string{path, o.metaDev} {
		if o.ro || p == "" {
			continue
		}
		wp, err := backend.WriteProtected(p)
		if err != nil {
			return err
		}
		if wp {
			log.Warn("device write-protected, mounting read-only", zap.String("device", p))
			o.ro = true
		}
	}
	// The device first: "already mounted" explains more than a busy mount point.
	dev, err := openWaiting(path, backend.OpenOptions{ReadOnly: o.ro, Kind: o.backend, MetaPath: o.metaDev,
		Warn: func(msg string) { log.Warn(msg) }}, stderr, "mount")
	if err != nil {
		if errors.Is(err, backend.ErrBusy) {
			// Mounted already: a second view of the same filesystem, as the
			// kernel gives for a block device mounted twice.
			if live, _ := streamfsMounts(path); len(live) > 0 {
				return secondView(path, live[0], mnt, o, log, ready)
			}
			return fmt.Errorf("%s is already mounted by another streamfs (or otherwise in use): %w", path, err)
		}
		return err
	}
	switch {
	case o.ftlTrace != "" && o.ro:
		log.Info("read-only mount: nothing for ftl_trace to record (a remount read-write does not start it)", zap.String("ftl_trace", o.ftlTrace))
	case o.ftlTrace != "":
		if dev, err = traceDevice(dev, o.ftlTrace, func(msg string) { log.Warn(msg) }); err != nil {
			return err
		}
		log.Info("recording device commands", zap.String("ftl_trace", o.ftlTrace))
	}
	defer dev.Close()
	if err := checkMountpoint(mnt); err != nil {
		return err
	}
	// A rule naming a stream the filesystem does not have stops the mount
	// before the store opens (and logs "mounted"); the allocator's count,
	// checked again after the open, is the same rule.
	if sb, _, err := meta.ReadSuper(dev); err == nil {
		n := dev.MaxStreams()
		if n == 0 {
			_, n = alloc.SoftwareStreams(sb.AGCount)
		}
		if err := o.rules.Check(n); err != nil {
			return fmt.Errorf("-o stream_rules: %w", err)
		}
	}
	// The node cache bounds the metadata in memory; tell the Go runtime
	// too, so garbage is collected before the heap grows far past it.
	cache := o.cacheBytes
	if cache <= 0 {
		cache = meta.DefaultCacheBytes
	}
	debug.SetMemoryLimit(cache*3/2 + 256<<20)
	// The live heap is small beside that limit (tens of MB for tens of
	// thousands of files), so the default GOGC of 100 collected every few
	// MB of garbage: a cycle per few hundred creates, its mark workers
	// taking CPU from the requests on a busy machine. Collect less often
	// and let the limit above bound the heap. GOGC in the environment wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	store, err := meta.Open(dev, meta.Options{
		ReadOnly: o.ro, Discard: o.discard, Policy: o.placement, PlacementCache: o.cache,
		CommitInterval: o.commit, CacheBytes: o.cacheBytes, Logger: log,
		NoRecovery: o.noRecovery, ACL: o.acl,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := o.rules.Check(store.MaxStreams()); err != nil {
		_ = store.Close()
		return fmt.Errorf("-o stream_rules: %w", err)
	}
	src := path
	if abs, aerr := absPath(path); aerr == nil {
		src = abs
	}
	// Catch signals before the mount exists: killed by one while mounted,
	// the daemon would hang in its own FUSE flush on exit.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	srv, err := sfs.Mount(&sfs.FS{Store: store, Log: log, Rules: o.rules}, mnt, sfs.MountOptions{
		Source: src, ReadOnly: o.ro, AllowOther: o.allowOther, Debug: o.debug, PlacementCache: o.cache,
		NoSuid: o.noSuid, NoDev: o.noDev, NoExec: o.noExec, Atime: o.atime,
		NodeLimit: sfs.NodeLimit(cache), Uring: o.uring,
	})
	if err != nil {
		_ = store.Close()
		return err
	}
	log.Info("serving", zap.String("device", path), zap.String("mountpoint", mnt),
		zap.String("backend", dev.Kind()), zap.String("placement", o.placement.String()),
		zap.Uint32("streams", store.MaxStreams()), zap.Bool("read_only", o.ro),
		zap.String("atime", o.atime.String()), zap.String("transport", srv.Transport()))
	if ready != nil {
		ready(nil)
	}
	go func() {
		for s := range sig {
			log.Info("unmounting", zap.String("signal", s.String()), zap.String("mountpoint", mnt))
			if err := srv.Unmount(); err != nil {
				log.Warn(busyHint(mnt), zap.Error(err))
			}
		}
	}()
	srv.Wait()
	signal.Stop(sig)
	close(sig)
	if err := store.Close(); err != nil {
		return err
	}
	return nil
}

// secondView mounts the filesystem that from already shows on mnt too: a
// bind mount, served by the daemon of the first mount, with this mount's
// own ro, suid, dev, exec and atime flags. The daemon's options (placement,
// commit, ...) stay those of the first mount; it exits once the last view
// is unmounted.
func secondView(path, from, mnt string, o mountOpts, log *zap.Logger, ready func(error)) error {
	if err := checkMountpoint(mnt); err != nil {
		return err
	}
	if err := syscall.Mount(from, mnt, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("%s is mounted on %s; a second view at %s: bind mount: %w", path, from, mnt, err)
	}
	flags := syscall.MS_BIND | syscall.MS_REMOUNT | sfs.MountFlags(sfs.MountOptions{ReadOnly: o.ro,
		NoSuid: o.noSuid, NoDev: o.noDev, NoExec: o.noExec, Atime: o.atime})
	if err := syscall.Mount("", mnt, "", flags, ""); err != nil {
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		return fmt.Errorf("%s is mounted on %s; a second view at %s: mount flags: %w", path, from, mnt, err)
	}
	log.Info("mounted a second view of the mounted filesystem", zap.String("device", path),
		zap.String("mountpoint", mnt), zap.String("first_mount", from), zap.Bool("read_only", o.ro))
	if ready != nil {
		ready(nil)
	}
	return nil
}

// busyHint says what to do when an unmount on a signal failed: the mount
// keeps serving until the files are closed.
func busyHint(mnt string) string {
	return fmt.Sprintf("cannot unmount %s: it is busy (a process has a file or its working directory there; see: fuser -vm %s). "+
		"Still serving: close those files and press Ctrl-C again (or send SIGTERM), or detach it now with: umount -l %s", mnt, mnt, mnt)
}

func absPath(p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + p, nil
}

// remount changes a running mount's flags, as `mount -o remount,...` does:
// the kernel's flags by mount(2), and the daemon's state by an ioctl (the
// kernel does not tell a FUSE daemon). Read-only goes kernel first, so a
// mount with files open for writing is refused (EBUSY) before the daemon
// changes; read-write goes daemon first, so a daemon that cannot write
// (norecovery, a write-protected device) leaves the mount read-only, and a
// kernel that refuses turns the daemon read-only again.
func remount(mnt string, o mountOpts) error {
	f, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer f.Close()
	kernel := func() error {
		flags := syscall.MS_REMOUNT | sfs.MountFlags(sfs.MountOptions{ReadOnly: o.ro,
			NoSuid: o.noSuid, NoDev: o.noDev, NoExec: o.noExec, Atime: o.atime})
		if err := syscall.Mount("", mnt, "", flags, ""); err != nil {
			return fmt.Errorf("mount(2): %w", err)
		}
		return nil
	}
	daemon := func(ro bool) error {
		if err := ioctl.Remount(f.Fd(), ro); err != nil {
			return remountErr(mnt, err)
		}
		return nil
	}
	if o.ro {
		if err := kernel(); err != nil {
			return err
		}
		return daemon(true)
	}
	if err := daemon(false); err != nil {
		return err
	}
	if err := kernel(); err != nil {
		if rerr := daemon(true); rerr != nil {
			return fmt.Errorf("%w; turning the daemon read-only again: %w", err, rerr)
		}
		return err
	}
	return nil
}

// remountErr explains the daemon's refusal of a remount; the ioctl carries
// only an errno, the daemon's log has the details.
func remountErr(mnt string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOTTY):
		return fmt.Errorf("%s is not a streamfs mount: %w", mnt, err)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("its device is write-protected (a read-only block device or an image that cannot be opened for writing); it stays read-only: %w", err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("it was mounted with norecovery (its journal was not replayed), so it cannot go read-write; it stays read-only: unmount it and mount it read-write: %w", err)
	case errors.Is(err, syscall.EIO):
		return fmt.Errorf("the filesystem is shut down after an error (see the daemon's log); unmount it and mount it again: %w", err)
	case errors.Is(err, syscall.EOPNOTSUPP):
		return fmt.Errorf("the daemon cannot make this mount read-write (see its log); it stays read-only: %w", err)
	}
	return err
}

// readyEnv names the descriptor a background mount reports readiness on.
const readyEnv = "STREAMFS_READY_FD"

// gcPercent is the daemon's GOGC unless the environment sets one.
const gcPercent = 400

// Helper implements the mount(8) helper form `streamfs PATH MOUNTPOINT -o
// OPTS` that mount.fuse3 runs: options anywhere, generic options ignored,
// and the mount goes to the background; the command returns once the mount
// is ready, or fails with the reason.
func Helper(args []string, stdout, stderr io.Writer) int {
	// Other flags (mount(8)'s -n, -v, -f ...) mean nothing here.
	opts, pos, _ := splitMountArgs(args)
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "usage: streamfs "+helperSynopsis)
		return exitUsage
	}
	o, err := parseMountOpts(opts)
	if err != nil {
		fmt.Fprintf(stderr, "streamfs: %v\n", err)
		return exitUsage
	}
	if o.remount {
		if err := remount(pos[1], o); err != nil {
			fmt.Fprintf(stderr, "streamfs: remount %s: %v\n", pos[1], err)
			return exitFail
		}
		return exitOK
	}
	if fd := os.Getenv(readyEnv); fd != "" {
		// The background child: report readiness on the pipe, log to the
		// inherited log file.
		n, _ := strconv.Atoi(fd)
		pipe := os.NewFile(uintptr(n), "ready")
		report := func(err error) {
			if err != nil {
				fmt.Fprintln(pipe, err.Error())
			} else {
				fmt.Fprintln(pipe, "ok")
			}
			pipe.Close()
		}
		// In the background the log goes to -o log=FILE, else to syslog.
		if o.logFile == "" {
			if w, err := syslog.New(syslog.LOG_DAEMON|syslog.LOG_INFO, "streamfs"); err == nil {
				defer w.Close()
				stderr = w
			}
		}
		if err := runMount(pos[0], pos[1], o, stderr, report); err != nil {
			return exitFail
		}
		return exitOK
	}
	// Go cannot fork: re-exec ourselves in a new session and wait for the
	// child to say the mount is ready.
	r, w, err := os.Pipe()
	if err != nil {
		return fail(stderr, "mount", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fail(stderr, "mount", err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if logf, err := os.OpenFile("/dev/null", os.O_WRONLY, 0); err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	}
	if err := cmd.Start(); err != nil {
		return fail(stderr, "mount", err)
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	r.Close()
	line = strings.TrimSpace(line)
	if line != "ok" {
		if line == "" {
			line = "the mount daemon exited before the mount was ready"
		}
		fmt.Fprintf(stderr, "streamfs: %s\n", line)
		return exitFail
	}
	_ = cmd.Process.Release()
	return exitOK
}

// writeHeapProfile writes a heap profile of live objects to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	runtime.GC() // live objects only
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return f.Close()
}

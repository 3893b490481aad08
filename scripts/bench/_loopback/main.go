// Command loopback is go-fuse's example/loopback reduced to what the
// benchmarks need, with kernel FUSE passthrough switchable. The stock example
// registers a backing file for every open when it runs as root on a kernel
// with FUSE passthrough, so file data then bypasses the daemon; -passthrough=false
// (the default here) keeps every read and write going through the daemon.
//
// The leading underscore keeps this directory out of "./..." patterns; build
// it explicitly: go build -o loopback ./scripts/bench/_loopback
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	debug := flag.Bool("debug", false, "print debugging messages")
	passthrough := flag.Bool("passthrough", false, "allow kernel FUSE passthrough (the stock example's behaviour as root)")
	noXattr := flag.Bool("noxattr", false, "answer ENOSYS to xattr requests")
	directMount := flag.Bool("directmount", true, "call mount(2) directly instead of fusermount")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file at unmount")
	allowOther := flag.Bool("allowother", false, "let other users in (with default_permissions, as the stock example's -allow-other)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [flags] MOUNTPOINT ORIGINAL\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	root, err := fs.NewLoopbackRoot(flag.Arg(1))
	if err != nil {
		log.Fatalf("NewLoopbackRoot(%s): %v", flag.Arg(1), err)
	}
	sec := time.Second
	opts := &fs.Options{
		// Same timeouts and permission handling as the go-fuse example.
		AttrTimeout:     &sec,
		EntryTimeout:    &sec,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			Debug:         *debug,
			DirectMount:   *directMount,
			FsName:        flag.Arg(1),
			Name:          "loopback",
			DisableXAttrs: *noXattr,
		},
	}
	if *allowOther {
		// Other users (e.g. a database server's own account) need it; the
		// kernel then checks permissions, as it does for streamfs.
		opts.MountOptions.AllowOther = true
		opts.MountOptions.Options = append(opts.MountOptions.Options, "default_permissions")
	}
	if !*passthrough {
		opts.MountOptions.DisabledCapabilities = fuse.CAP_PASSTHROUGH
	}
	server, err := fs.Mount(flag.Arg(0), root, opts)
	if err != nil {
		log.Fatalf("mount: %v", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		_ = server.Unmount()
	}()
	server.Wait()
}

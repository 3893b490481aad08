package meta

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamfs/streamfs/alloc"
)

// BenchmarkParallelAppend runs 16 writers appending 4 KiB blocks to 16
// files, each in its own directory (so its own AG where the geometry
// allows), with streams: the write path of the W1 workload without FUSE.
// Run with -mutexprofile to see which locks writers wait for:
//
//	go test ./fs/meta -run '^$' -bench ParallelAppend -benchtime 200000x -mutexprofile /tmp/mutex.out
//	go tool pprof -top fs/meta.test /tmp/mutex.out
func BenchmarkParallelAppend(b *testing.B) {
	fd := newPlainImage(b, "", 8<<30, 64)
	o := testOpts()
	o.CommitInterval = time.Second
	o.Policy = alloc.PolicyStreams
	s, err := Open(fd, o)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const writers = 16
	files := make([]*Inode, writers)
	for i := range files {
		d, err := s.Create(s.Root(), fmt.Sprintf("d%d", i), NewInode{Mode: syscall.S_IFDIR | 0o755})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.SetStream(d, uint32(i%int(s.Allocator().MaxStreams()))+1); err != nil {
			b.Fatal(err)
		}
		if files[i], err = s.Create(d, "f", NewInode{Mode: syscall.S_IFREG | 0o644}); err != nil {
			b.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	b.SetBytes(4096)
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/writers + 1
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(f *Inode) {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := s.Write(f, buf, int64(i)*4096, WriteOpts{}); err != nil {
					b.Error(err)
					return
				}
			}
		}(files[w])
	}
	wg.Wait()
}

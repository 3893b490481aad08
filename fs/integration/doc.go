// Package integration holds streamfs's end-to-end tests: they build the real
// streamfs binary, format sparse image files (and a loop device), mount them
// through /dev/fuse and drive the mounts with coreutils, tar, fio and the C
// programs in testdata. They need root and /dev/fuse and skip otherwise.
//
// Run them with:
//
//	go test ./fs/integration/ -count=1 -v -timeout 20m
package integration

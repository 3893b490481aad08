package meta

import "testing"

// sized returns small under -short (scripts/test.sh, on a shared CI
// machine under -race) and full otherwise (scripts/soak.sh): the
// randomized and large tests keep every check and shrink only their
// number of operations, seeds or samples.
func sized[T int | int64 | uint64](full, small T) T {
	if testing.Short() {
		return small
	}
	return full
}

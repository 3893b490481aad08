//go:build race

package meta

// raceEnabled: the race detector allocates, and sync.Pool drops items at
// random under it, so allocation counts mean nothing then.
const raceEnabled = true

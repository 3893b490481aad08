// Package crashtest holds systematic crash tests of the metadata layer
// (fs/meta), in the manner of CrashMonkey/B3 and dm-log-writes: a workload
// runs once over a device that records every write and flush
// (faulty.Recorder), then every state a power cut could leave on the media
// — each prefix of the writes, torn writes, and the unflushed writes of the
// last flush epoch dropped or landed in any order — is built, checked by
// fsck, mounted and compared with what the workload's fsync, fdatasync and
// sync calls acknowledged.
//
// The tests are in the _test files: TestCrashB3 enumerates short operation
// sequences, TestCrashRandom runs seeded random ones; scripts/crash-soak.sh
// runs both at full size.
package crashtest

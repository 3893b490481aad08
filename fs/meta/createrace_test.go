package meta

import "testing"

// A lookup by inode number (what the FUSE layer does for a file handle)
// that finds an inode while Create is making it must not be able to change
// it before its creation is journaled: otherwise the change can be durable
// (fsync) while the creation is not, and the journal replays an inode no
// directory entry reaches. The hook runs inside Create at the moment the
// new inode is published; a change through the number then either happens
// at once (the inode is not locked: the bug) or waits for Create.
func TestCreateRaceLookupByNumber(t *testing.T) {
	fd, _ := newTestImage(t, 64<<20, 5)
	s, err := Open(fd, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	change := func(in *Inode) error {
		if err := s.Setattr(in, SetAttr{Mode: &mode}); err != nil {
			return err
		}
		return s.Fsync(in)
	}
	var waited chan error
	immediate := false
	testHookCreate = func(ino uint64) {
		testHookCreate = nil
		in := s.Get(ino)
		if in == nil {
			return // not visible yet: nothing can change it
		}
		if in.mu.TryLock() {
			// Nothing holds the new inode: a concurrent operation through
			// its number runs now, before the creation is journaled.
			in.mu.Unlock()
			immediate = true
			if err := change(in); err != nil {
				t.Errorf("change through the number: %v", err)
			}
			return
		}
		waited = make(chan error, 1)
		go func() { waited <- change(in) }()
	}
	defer func() { testHookCreate = nil }()
	f := mustCreate(t, s, s.Root(), "f")
	if waited != nil {
		if err := <-waited; err != nil {
			t.Fatalf("change through the number after the create: %v", err)
		}
	}
	// Only what was fsynced survives: the change, and whatever it made
	// durable with it.
	crash(t, s, fd)
	if s, err = Open(fd, testOpts()); err != nil {
		t.Fatal(err)
	}
	g, err := s.Lookup(s.Root(), "f")
	switch {
	case err != nil:
		t.Errorf("after the crash: the fsynced inode %d has no entry (%v); change ran before the create was journaled: %v", f.Ino(), err, immediate)
	case g.Ino() != f.Ino() || g.Attr().Mode&0o7777 != mode:
		t.Errorf("after the crash: f is inode %d mode %o, want %d mode %o", g.Ino(), g.Attr().Mode&0o7777, f.Ino(), mode)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustFsck(t, fd, false)
}

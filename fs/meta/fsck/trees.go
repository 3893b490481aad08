package fsck

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/fs/format"
)

// validType reports the file types streamfs stores.
func validType(mode uint32) bool {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFCHR,
		syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK:
		return true
	}
	return false
}

// owner is one user of a device block range, for the overlap check.
type owner struct {
	start, n uint64
	what     string
}

// checkTrees checks every AG tree's structure (checksums, key order,
// sibling and parent keys, levels), then what the keys say: inodes,
// directory entries (they point at inodes, each directory reachable from
// the root once, parent pointers), link counts, block counts, extents
// (inside the data area) and free space (every block of the data area is
// exactly one of: free, a tree node, a file's extent; space.go) and the AG
// counters (counters.go). With -y, damaged trees are rebuilt first
// (salvage.go), then link and block counts, dangling entries, lost inodes
// (to lost+found), free space and AG counters are repaired.
func (f *fsck) checkTrees() {
	img := f.img
	sb := img.Super()
	trees := img.Trees()
	// Attributes replay left in memory go into the trees first, as a
	// checkpoint would put them.
	for _, err := range img.FlushInodes() {
		f.problem(false, "%v", err)
	}
	// Replay in memory moved tree nodes: account for them as a checkpoint would.
	if err := img.FoldNodeSpace(); err != nil {
		f.problem(false, "tree node space: %v", err)
	}
	if f.repair && f.salvageTrees() {
		trees = img.Trees()
	}
	type inodeInfo struct {
		a       format.InodeRec
		links   uint32 // entries pointing here
		subdirs uint32
		blocks  uint64
		parents []uint64
	}
	inodes := map[uint64]*inodeInfo{}
	type dirent struct {
		dir, ino uint64
		name     string
	}
	var dirents []dirent
	var owners, zoneExts []owner
	zones := f.loadZones() // nil unless zoned with usable write pointers
	orphans := map[uint64]bool{}
	counts := make([]agCount, len(trees))
	freeBad := false // a free-space record is malformed or misplaced
	var acls storedACLs
	for ag, t := range trees {
		cnt := &counts[ag]
		for _, err := range t.Check(func(blk uint64, level int) {
			owners = append(owners, owner{blk, 1, fmt.Sprintf("AG %d tree node", ag)})
		}) {
			f.problem(false, "AG %d tree: %v", ag, err)
		}
		var extents []struct {
			ino uint64
			e   extent
		}
		err := t.Ascend(nil, func(k, v []byte) bool {
			switch {
			case len(k) > 0 && k[0] == format.KeyFreeSpc:
				fs, fn, err := format.DecodeFree(k, v)
				if err != nil {
					freeBad = true
					f.problem(true, "AG %d: %v", ag, err)
					return true
				}
				owners = append(owners, owner{fs, fn, freeSpace})
				if fs/sb.AGBlocks != uint64(ag) || (fs+fn-1)/sb.AGBlocks != uint64(ag) {
					freeBad = true
					f.problem(true, "free extent %d+%d recorded in AG %d's tree", fs, fn, ag)
				}
			case len(k) == 10 && k[0] == format.KeyAG && bytes.HasPrefix(k, format.OrphanPrefix()):
				orphans[binary.BigEndian.Uint64(k[2:])] = true
			case len(k) > 0 && k[0] == format.KeyAG:
				cnt.agKey(ag, k, v)
			case len(k) > 0 && k[0] == format.KeyInoSpc:
				ino, kind, rest, err := format.InoKey(k)
				if err != nil {
					f.problem(false, "AG %d: %v", ag, err)
					return true
				}
				if alloc.InoAG(ino) != uint32(ag) {
					f.problem(false, "inode %d's metadata in AG %d's tree", ino, ag)
				}
				switch kind {
				case format.KindInode:
					a, err := format.DecodeInodeVal(v)
					if err != nil || a.Ino != ino || !validType(a.Mode) {
						f.problem(false, "inode %d: bad record (%v)", ino, err)
						return true
					}
					inodes[ino] = &inodeInfo{a: a}
					cnt.inode(&a)
				case format.KindExtent:
					e, err := decodeExtent(k, v)
					if err != nil {
						f.problem(false, "inode %d: %v", ino, err)
						return true
					}
					extents = append(extents, struct {
						ino uint64
						e   extent
					}{ino, e})
				case format.KindDirent:
					name, _, child, _, err := format.DecodeDirent(k, v)
					if err != nil {
						f.problem(false, "directory %d: %v", ino, err)
						return true
					}
					dirents = append(dirents, dirent{ino, child, name})
				case format.KindXattr:
					// rest: name, 0, chunk number (format.XattrKey).
					if n := len(rest); n >= 3 && rest[n-2] == 0 {
						if name := string(rest[:n-2]); name == format.ACLAccessXattr || name == format.ACLDefaultXattr {
							acls.add(ag, ino, name, v)
						}
					}
				case format.KindTarget:
				default:
					cnt.unknownKey(k)
				}
			default:
				cnt.unknownKey(k)
			}
			return true
		})
		if err != nil {
			f.problem(false, "AG %d: reading tree: %v", ag, err)
			continue
		}
		for _, x := range extents {
			in := inodes[x.ino]
			if in == nil {
				if f.problem(true, "extent %d+%d of missing inode %d: dropped", x.e.LBlk, x.e.Len, x.ino) {
					if _, err := t.Delete(format.ExtentKey(x.ino, x.e.LBlk)); err != nil {
						f.problem(false, "dropping extent of inode %d: %v", x.ino, err)
					}
					f.fixes++
				}
				continue
			}
			why := ""
			switch {
			case !sb.InDataArea(x.e.PBlk, x.e.Len) && sb.Zoned():
				why = fmt.Sprintf("at block %d outside the sequential zones", x.e.PBlk)
			case !sb.InDataArea(x.e.PBlk, x.e.Len):
				why = fmt.Sprintf("at block %d outside the data area", x.e.PBlk)
			case zones != nil:
				why = zones.badExtent(x.e.PBlk, x.e.Len)
			}
			if why != "" {
				// As e2fsck clears illegal blocks: the file gets a hole
				// there, and its block count is fixed below.
				if f.problem(true, "inode %d extent %d+%d %s: dropped", x.ino, x.e.LBlk, x.e.Len, why) {
					if _, err := t.Delete(format.ExtentKey(x.ino, x.e.LBlk)); err != nil {
						f.problem(false, "dropping extent of inode %d: %v", x.ino, err)
					}
					f.fixes++
					continue
				}
				in.blocks += x.e.Len
				continue
			}
			in.blocks += x.e.Len
			o := owner{x.e.PBlk, x.e.Len, fmt.Sprintf("inode %d", x.ino)}
			if sb.Zoned() {
				// The free-space records describe only the conventional
				// zones; file data is checked against the zones.
				zoneExts = append(zoneExts, o)
			} else {
				owners = append(owners, o)
			}
		}
	}
	f.checkACLs(acls)
	f.checkSpace(owners, freeBad)
	if zones != nil {
		f.checkZones(zones, zoneExts)
	}
	f.checkCounters(counts)
	// Directory entries.
	tx := img.Edit()
	root := inodes[rootIno]
	switch {
	case root == nil:
		// Lost with a damaged node: made anew, as e2fsck does; entries
		// that survived in it are found again.
		if f.problem(true, "root directory missing: made anew") {
			now := time.Now().UnixNano()
			a := format.InodeRec{Ino: rootIno, Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Parent: rootIno, Gen: 1,
				Atime: now, Mtime: now, Ctime: now, Btime: now}
			tx.Inode(&a)
			root = &inodeInfo{a: a}
			inodes[rootIno] = root
		}
	case root.a.Mode&syscall.S_IFMT != syscall.S_IFDIR:
		f.problem(false, "root directory is not a directory")
	}
	for _, d := range dirents {
		dir, child := inodes[d.dir], inodes[d.ino]
		if dir == nil || dir.a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			if f.problem(true, "entry %q in %d, which is not a directory: dropped", d.name, d.dir) {
				if _, err := trees[alloc.InoAG(d.dir)].Delete(format.DirentKey(d.dir, d.name)); err != nil {
					f.problem(false, "dropping entry %q in %d: %v", d.name, d.dir, err)
				}
				f.fixes++
			}
			continue
		}
		if child == nil {
			if f.problem(true, "directory %d entry %q points at missing inode %d: dropped", d.dir, d.name, d.ino) {
				tx.Unlink(d.dir, d.name)
			}
			continue
		}
		child.links++
		child.parents = append(child.parents, d.dir)
		if child.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			dir.subdirs++
		}
	}
	// Inodes no entry reaches (open-unlinked orphans aside).
	var homeless []uint64 // for lost+found
	for ino, in := range inodes {
		if ino == rootIno || in.links > 0 {
			continue
		}
		if orphans[ino] && in.a.Nlink == 0 {
			f.rep.Orphans++
			continue
		}
		if f.problem(true, "inode %d is not in any directory: moved to lost+found", ino) {
			homeless = append(homeless, ino)
		}
	}
	if len(homeless) > 0 {
		// As e2fsck: /lost+found (made if missing) gets an entry "#ino"
		// for every inode no entry reaches; link counts follow below.
		var lf uint64
		for _, d := range dirents {
			if c := inodes[d.ino]; d.dir == rootIno && d.name == "lost+found" && c != nil && c.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				lf = d.ino
			}
		}
		if lf == 0 {
			agino := max(img.NextAgino(0), uint32(rootIno)+1)
			for inodes[alloc.MakeIno(0, agino)] != nil {
				agino++
			}
			img.SetNextAgino(0, agino+1)
			lf = alloc.MakeIno(0, agino)
			now := time.Now().UnixNano()
			a := format.InodeRec{Ino: lf, Mode: syscall.S_IFDIR | 0o700, Nlink: 2, Parent: rootIno, Gen: img.NewGen(),
				Atime: now, Mtime: now, Ctime: now, Btime: now}
			tx.Inode(&a)
			tx.Link(rootIno, lf, a.Mode, "lost+found")
			inodes[lf] = &inodeInfo{a: a, links: 1, parents: []uint64{rootIno}}
			if root != nil {
				root.subdirs++
			}
		}
		slices.Sort(homeless)
		for _, ino := range homeless {
			in := inodes[ino]
			tx.Link(lf, ino, in.a.Mode, "#"+strconv.FormatUint(ino, 10))
			in.links++
			in.parents = append(in.parents, lf)
			if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				inodes[lf].subdirs++
				in.a.Parent = lf
				tx.Inode(&in.a)
			}
		}
	}
	// Reachability: walk parents up to the root.
	for ino, in := range inodes {
		if ino == rootIno || len(in.parents) == 0 {
			continue
		}
		if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR && len(in.parents) > 1 {
			f.problem(false, "directory %d has %d entries", ino, len(in.parents))
		}
		seen := map[uint64]bool{ino: true}
		cur := in
		for steps := 0; ; steps++ {
			p := cur.parents[0]
			if p == rootIno {
				break
			}
			if seen[p] || inodes[p] == nil || len(inodes[p].parents) == 0 {
				f.problem(false, "inode %d is not reachable from the root (directory cycle or detached tree)", ino)
				break
			}
			seen[p] = true
			cur = inodes[p]
		}
		if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR && in.a.Parent != in.parents[0] {
			if f.problem(true, "directory %d's parent pointer is %d, its entry is in %d", ino, in.a.Parent, in.parents[0]) {
				in.a.Parent = in.parents[0]
				tx.Inode(&in.a)
			}
		}
	}
	// Link and block counts.
	for ino, in := range inodes {
		want := in.links
		if in.a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			want = 2 + in.subdirs
			if ino == rootIno {
				want = 2 + in.subdirs
			}
		}
		changed := false
		if in.a.Nlink != want && !(in.links == 0 && orphans[ino]) {
			if f.problem(true, "inode %d link count %d, counted %d", ino, in.a.Nlink, want) {
				in.a.Nlink, changed = want, true
			}
		}
		if in.a.Blocks != in.blocks {
			if f.problem(true, "inode %d block count %d, its extents map %d", ino, in.a.Blocks, in.blocks) {
				in.a.Blocks, changed = in.blocks, true
			}
		}
		if changed {
			tx.Inode(&in.a)
		}
		f.rep.Inodes++
		switch in.a.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			f.rep.Dirs++
		case syscall.S_IFREG:
			f.rep.Files++
		}
	}
	for ino := range orphans {
		if in := inodes[ino]; in == nil || in.a.Nlink != 0 {
			f.problem(false, "orphan list names inode %d, which is not an unlinked inode", ino)
		}
	}
	if changed, err := tx.Done(); changed {
		if err != nil {
			f.problem(false, "repair failed: %v", err)
			return
		}
		f.fixes++
	}
}

// extent is one extent record: file blocks [LBlk, LBlk+Len) at device
// block PBlk.
type extent struct{ LBlk, Len, PBlk uint64 }

func decodeExtent(k, v []byte) (extent, error) {
	lblk, n, pblk, _, _, err := format.DecodeExtent(k, v)
	return extent{LBlk: lblk, Len: n, PBlk: pblk}, err
}

// storedACL is one POSIX ACL xattr as its chunks hold it.
type storedACL struct {
	ag     int
	ino    uint64
	name   string
	val    []byte
	chunks int
}

// storedACLs are the ACL xattrs in key order: an xattr's chunks are
// consecutive keys.
type storedACLs []storedACL

func (a *storedACLs) add(ag int, ino uint64, name string, chunk []byte) {
	if n := len(*a); n > 0 && (*a)[n-1].ino == ino && (*a)[n-1].name == name {
		(*a)[n-1].val = append((*a)[n-1].val, chunk...)
		(*a)[n-1].chunks++
		return
	}
	*a = append(*a, storedACL{ag: ag, ino: ino, name: name, val: append([]byte(nil), chunk...), chunks: 1})
}

// checkACLs checks every stored POSIX ACL as the kernel checks one it is
// given (it does not check one it reads back, and its permission check
// relies on the entries' order). As xfs_repair does, -y removes an ACL
// that is not valid: the mode alone then governs access, and an access
// ACL's mask was already the mode's group bits.
func (f *fsck) checkACLs(acls storedACLs) {
	trees := f.img.Trees()
	for _, a := range acls {
		err := format.CheckACL(a.val)
		if err == nil {
			continue
		}
		if !f.problem(true, "inode %d: stored %s: %v: removed", a.ino, a.name, err) {
			continue
		}
		for i := range a.chunks {
			if _, err := trees[a.ag].Delete(format.XattrKey(a.ino, a.name, i)); err != nil {
				f.problem(false, "removing inode %d's %s: %v", a.ino, a.name, err)
			}
		}
		f.fixes++
	}
}

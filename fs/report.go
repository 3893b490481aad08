package fs

import (
	"encoding/json"
	"sort"

	"github.com/streamfs/streamfs/alloc"
	"github.com/streamfs/streamfs/backend"
	"github.com/streamfs/streamfs/backend/ftl"
	"github.com/streamfs/streamfs/backend/nvme"
	"github.com/streamfs/streamfs/fs/format"
	"github.com/streamfs/streamfs/fs/meta"
)

// InfoDoc is `streamfs info --json`: the geometry, plus the device's FDP
// configuration when it is an NVMe namespace.
type InfoDoc struct {
	format.Info
	Backend string        `json:"backend,omitempty"`
	FDP     *nvme.FDPInfo `json:"fdp,omitempty"`
	// Model is the geometry of a modelled FDP SSD (backend ftl).
	Model *ftl.Label `json:"ftl,omitempty"`
	// ZoneGeometry is a zoned device's shape (zone size and capacity in
	// bytes, conventional and total zones, open and active limits).
	ZoneGeometry *backend.ZoneGeometry `json:"zone_geometry,omitempty"`
}

// ZoneGeometryOf returns dev's zone geometry, nil when it has no zones.
func ZoneGeometryOf(dev backend.Device) *backend.ZoneGeometry {
	z, ok := dev.(backend.Zoned)
	if !ok {
		return nil
	}
	g := z.Geometry()
	return &g
}

// fdpDevice is what the NVMe backend offers beyond backend.Device.
type fdpDevice interface {
	FDPInfo() nvme.FDPInfo
	FDPStats() (nvme.FDPStats, error)
}

func infoDoc(st *meta.Store) ([]byte, error) {
	doc := InfoDoc{Info: st.Super().Info(), Backend: st.Device().Kind(), ZoneGeometry: ZoneGeometryOf(st.Device())}
	if d, ok := st.Device().(fdpDevice); ok {
		i := d.FDPInfo()
		doc.FDP = &i
	}
	if d, ok := st.Device().(*ftl.Device); ok {
		l := d.Label()
		doc.Model = &l
	}
	return json.Marshal(doc)
}

// BmapExtent is one row of `streamfs bmap --json`.
type BmapExtent struct {
	Offset uint64 `json:"offset"` // bytes into the file
	Length uint64 `json:"length"` // bytes
	Block  uint64 `json:"block"`  // filesystem block number
	// AG is the extent's allocation group; on the zoned layout file data
	// lies in no AG, and Zone is its zone instead (the device's zone
	// index: block / zone size).
	AG        *uint32 `json:"ag,omitempty"`
	Zone      *uint64 `json:"zone,omitempty"`
	Stream    uint32  `json:"stream"` // stream the extent was written under
	Unwritten bool    `json:"unwritten"`
}

// BmapDoc is the whole `streamfs bmap --json` document.
type BmapDoc struct {
	BlockSize uint32       `json:"block_size"`
	Extents   []BmapExtent `json:"extents"`
	// Stream is the file's stream and StreamSource where it came from:
	// "none", "set" (ioctl), "directory" or "rule".
	Stream       uint32 `json:"stream"`
	StreamSource string `json:"stream_source"`
}

// StreamDoc is a file's or directory's stream and where it came from, as
// in BmapDoc.
type StreamDoc struct {
	Stream       uint32 `json:"stream"`
	StreamSource string `json:"stream_source"`
}

// StreamSourceName names a format.StreamSrc value.
func StreamSourceName(src uint8) string {
	switch src {
	case format.StreamSrcSet:
		return "set"
	case format.StreamSrcDir:
		return "directory"
	case format.StreamSrcRule:
		return "rule"
	}
	return "none"
}

// StreamStats describes one stream id in `streamfs stats`.
type StreamStats struct {
	Stream       uint32 `json:"stream"`
	Files        uint64 `json:"files"`
	BytesWritten uint64 `json:"bytes_written"`
	Blocks       uint64 `json:"blocks_allocated"`
	// Files by where their stream came from.
	FromSet  uint64 `json:"files_stream_set"`
	FromDir  uint64 `json:"files_stream_directory"`
	FromRule uint64 `json:"files_stream_rule"`
}

// StatsDoc is the `streamfs stats --json` document.
type StatsDoc struct {
	Policy         string          `json:"policy"`
	MaxStreams     uint32          `json:"max_streams"`
	HWStreams      uint32          `json:"hw_streams"`
	Backend        string          `json:"backend"`
	PlacementCache bool            `json:"placement_cache"`
	Transport      string          `json:"transport"` // FUSE transport: classic or io_uring (its rings' shape)
	CacheHits      uint64          `json:"cache_hits"`
	CacheMisses    uint64          `json:"cache_misses"`
	AGs            []alloc.AGStats `json:"ags"`
	Streams        []StreamStats   `json:"streams"`
	Counters       meta.Counters   `json:"counters"`
	// FuseOps counts the FUSE requests served since mount, by opcode.
	FuseOps map[string]uint64 `json:"fuse_ops,omitempty"`
	// FuseNodes is the number of inodes the daemon holds a node for (the
	// kernel has them cached); NodeLimit bounds it (0: unbounded) and
	// NodesPruned counts the nodes the kernel was asked to drop.
	FuseNodes   int            `json:"fuse_nodes"`
	NodeLimit   int            `json:"fuse_node_limit"`
	NodesPruned uint64         `json:"fuse_nodes_pruned"`
	FDP         *nvme.FDPStats `json:"fdp,omitempty"`
	FDPError    string         `json:"fdp_error,omitempty"`
	// Zones are the zoned layout's counters: zone space, the zone
	// allocator's slots and inode-to-zone cache, reclaim, and per stream
	// the bytes written and copied by reclaim.
	Zones *meta.ZoneCounters `json:"zones,omitempty"`
}

func bmapDoc(st *meta.Store, in *meta.Inode) ([]byte, error) {
	sb := st.Super()
	bs := uint64(sb.BlockSize)
	a := in.Attr()
	doc := BmapDoc{BlockSize: uint32(bs), Extents: []BmapExtent{}, Stream: a.Stream, StreamSource: StreamSourceName(a.StreamSrc)}
	exts, err := st.Extents(in)
	if err != nil {
		return nil, err
	}
	for _, e := range exts {
		x := BmapExtent{Offset: e.LBlk * bs, Length: e.Len * bs, Block: e.PBlk, Stream: e.Stream, Unwritten: e.Unwritten()}
		if sb.Zoned() {
			x.Zone = ptr(e.PBlk / sb.ZoneBlocks)
		} else {
			x.AG = ptr(uint32(e.PBlk / sb.AGBlocks))
		}
		doc.Extents = append(doc.Extents, x)
	}
	return json.Marshal(doc)
}

func statsDoc(f *FS) ([]byte, error) {
	st := f.Store
	as := st.Allocator().Stats()
	doc := StatsDoc{
		Policy: as.Policy, MaxStreams: st.MaxStreams(), HWStreams: st.Device().MaxStreams(),
		Backend: st.Device().Kind(), PlacementCache: f.PlacementCache, Transport: f.Transport(),
		CacheHits: as.CacheHits, CacheMisses: as.CacheMisses, AGs: as.AGs,
		Counters:  st.Counters(),
		FuseOps:   f.FuseOps(),
		FuseNodes: f.nodes.len(), NodeLimit: f.nodes.getLimit(), NodesPruned: f.nodes.pruned.Load(),
	}
	files, bySrc := st.StreamFileSources()
	bytes := st.StreamBytes()
	ids := map[uint32]bool{}
	for k := range files {
		ids[k] = true
	}
	for k := range bytes {
		ids[k] = true
	}
	for k := range as.StreamBlocks {
		ids[k] = true
	}
	for id := range ids {
		src := bySrc[id]
		doc.Streams = append(doc.Streams, StreamStats{Stream: id, Files: files[id], BytesWritten: bytes[id], Blocks: as.StreamBlocks[id],
			FromSet: src[format.StreamSrcSet], FromDir: src[format.StreamSrcDir], FromRule: src[format.StreamSrcRule]})
	}
	sort.Slice(doc.Streams, func(i, j int) bool { return doc.Streams[i].Stream < doc.Streams[j].Stream })
	if zc, ok := st.ZoneCounters(); ok {
		doc.Zones = &zc
	}
	if d, ok := st.Device().(fdpDevice); ok {
		if fs, err := d.FDPStats(); err != nil {
			doc.FDPError = err.Error()
		} else {
			doc.FDP = &fs
		}
	}
	return json.Marshal(doc)
}

func ptr[T any](v T) *T { return &v }

package format

// Info is the geometry `streamfs info --json` prints (the README documents
// every field).
type Info struct {
	UUID          string `json:"uuid"`
	Label         string `json:"label"`
	Version       uint32 `json:"version"`
	BlockSize     uint32 `json:"block_size"`
	TotalBlocks   uint64 `json:"total_blocks"`
	SizeBytes     uint64 `json:"size_bytes"`
	AGCount       uint32 `json:"ag_count"`
	AGBlocks      uint64 `json:"ag_blocks"`
	CkptStart     uint64 `json:"checkpoint_start"`
	CkptBlocks    uint64 `json:"checkpoint_blocks"`
	JournalStart  uint64 `json:"journal_start"`
	JournalBlocks uint64 `json:"journal_blocks"`
	DataStart     uint64 `json:"data_start"`
	BackupBlock   uint64 `json:"backup_super_block"`
	Compat        uint32 `json:"features_compat"`
	ROCompat      uint32 `json:"features_ro_compat"`
	Incompat      uint32 `json:"features_incompat"`
	CreatedNs     int64  `json:"created_unix_ns"`
	// Zoned layout only: the sequential zones file data lives in.
	Zoned      bool   `json:"zoned"`
	ZoneStart  uint64 `json:"zone_start,omitempty"`
	ZoneBlocks uint64 `json:"zone_blocks,omitempty"`
	ZoneCap    uint64 `json:"zone_cap_blocks,omitempty"`
	Zones      uint64 `json:"zones,omitempty"`
	ZonedBytes uint64 `json:"zoned_bytes,omitempty"`
}

// Info returns the geometry of s.
func (s *Super) Info() Info {
	return Info{
		UUID: UUIDString(s.UUID), Label: s.LabelString(), Version: s.Version,
		BlockSize: s.BlockSize, TotalBlocks: s.TotalBlocks, SizeBytes: s.TotalBlocks * uint64(s.BlockSize),
		AGCount: s.AGCount, AGBlocks: s.AGBlocks,
		CkptStart: s.CkptStart, CkptBlocks: s.CkptBlocks,
		JournalStart: s.JournalStart, JournalBlocks: s.JournalBlocks,
		DataStart: s.MetaEnd(), BackupBlock: s.BackupBlock,
		Compat: s.Compat, ROCompat: s.ROCompat, Incompat: s.Incompat, CreatedNs: s.CTime,
		Zoned: s.Zoned(), ZoneStart: s.DataStart, ZoneBlocks: s.ZoneBlocks, ZoneCap: s.ZoneCap, Zones: s.DataZones,
		ZonedBytes: s.DataZones * s.ZoneCap * uint64(s.BlockSize),
	}
}

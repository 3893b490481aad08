package nvme

import (
	"fmt"

	"github.com/streamfs/streamfs/backend"
)

// FDPInfo describes the namespace's flexible data placement setup.
type FDPInfo struct {
	Enabled            bool     `json:"enabled"`
	ConfigIndex        uint8    `json:"config_index"`
	EnduranceGroup     uint16   `json:"endurance_group"`
	ReclaimGroups      uint32   `json:"reclaim_groups"`
	ReclaimUnitHandles uint16   `json:"reclaim_unit_handles"`
	ReclaimUnitSize    uint64   `json:"reclaim_unit_size"` // bytes
	PlacementIDs       []uint16 `json:"placement_ids"`     // stream N uses PlacementIDs[N-1]
	NamespaceID        uint32   `json:"nsid"`
	LBASize            int      `json:"lba_size"`
	MaxTransfer        int64    `json:"max_transfer"` // bytes per command
}

// FDPInfo returns the FDP setup read at open.
func (d *Device) FDPInfo() FDPInfo {
	i := d.info
	i.PlacementIDs = append([]uint16(nil), d.info.PlacementIDs...)
	return i
}

// HandleStats is one placement handle's state with the stream mapped to it.
type HandleStats struct {
	Stream uint32 `json:"stream"` // write stream using this handle, 0 = none
	RUHStatus
	// AvailableBytes is RUAMW in bytes: what the handle's current reclaim
	// unit can still take before the device moves it to a new one.
	AvailableBytes uint64 `json:"available_bytes"`
	// HostBytes, MediaBytes and WAF count this handle's writes where the
	// device keeps them per handle (the ftl model; an NVMe drive's FDP
	// statistics are per endurance group only).
	HostBytes  uint64  `json:"host_bytes_written,omitempty"`
	MediaBytes uint64  `json:"media_bytes_written,omitempty"`
	WAF        float64 `json:"waf,omitempty"`
}

// FDPStats is a snapshot of per-handle usage and the endurance group's
// write counters.
type FDPStats struct {
	Handles           []HandleStats `json:"handles"`
	HostBytesWritten  uint64        `json:"host_bytes_written"`
	MediaBytesWritten uint64        `json:"media_bytes_written"`
	MediaBytesErased  uint64        `json:"media_bytes_erased"`
	// WAF is media bytes written over host bytes written; 0 before any
	// write.
	WAF float64 `json:"waf"`
	// ModelError is set on a modelled drive (backend ftl) whose counters
	// are incomplete: the model stopped counting, or its last state save
	// failed (a crash would lose the counts since the last good one).
	// Benchmarks must not trust a run that shows it.
	ModelError string `json:"model_error,omitempty"`
	// ModelSaves and ModelSaveFailures count the model's state saves since
	// mount.
	ModelSaves        uint64 `json:"model_saves,omitempty"`
	ModelSaveFailures uint64 `json:"model_save_failures,omitempty"`
}

// FDPStats reads the reclaim unit handle status and the FDP statistics log.
func (d *Device) FDPStats() (FDPStats, error) {
	ruhs, err := d.ruhStatus()
	if err != nil {
		return FDPStats{}, fmt.Errorf("device %s: %w", d.path, err)
	}
	var st FDPStats
	for _, r := range ruhs {
		h := HandleStats{RUHStatus: r, AvailableBytes: r.RUAMW << d.lbaShift}
		for i, pid := range d.pids {
			if pid == r.PID {
				h.Stream = uint32(i + 1)
				break
			}
		}
		st.Handles = append(st.Handles, h)
	}
	buf := backend.AlignedBuf(fdpStatsSize)
	if err := d.getLog(logFDPStats, d.info.EnduranceGroup, buf); err != nil {
		return FDPStats{}, fmt.Errorf("device %s: %w", d.path, err)
	}
	s, err := parseFDPStats(buf)
	if err != nil {
		return FDPStats{}, fmt.Errorf("device %s: %w", d.path, err)
	}
	st.HostBytesWritten, st.MediaBytesWritten, st.MediaBytesErased = s.hbmw, s.mbmw, s.mbe
	if s.hbmw > 0 {
		st.WAF = float64(s.mbmw) / float64(s.hbmw)
	}
	return st, nil
}

package nvme

import (
	"errors"
	"fmt"
	"testing"
)

// ctrlModel answers the admin commands and I/O Management Receive that
// identify and FDPStats send, laying out its data as the spec does.
type ctrlModel struct {
	nsid       uint32
	nsze       uint64
	lbads      uint8
	ms         uint16
	endgid     uint16
	mdts       uint8
	ctratt     uint32
	dmrsl      uint32
	fdpEnabled bool
	confIdx    uint8
	runs       uint64
	ruhs       []RUHStatus
	hbmw, mbmw uint64
	noLogs     bool // reject Get Log Page
}

func (m *ctrlModel) admin(c *passthru64, buf []byte) (uint64, error) {
	switch c.opcode {
	case adminIdentify:
		if len(buf) != identifySize {
			return 0, fmt.Errorf("identify with %d bytes", len(buf))
		}
		clear(buf)
		switch c.cdw10 & 0xff {
		case cnsNamespace:
			if c.nsid != m.nsid {
				return 0, &StatusError{Opcode: c.opcode, Admin: true, Status: 0x0b} // invalid namespace
			}
			le64(buf, 0, m.nsze)
			buf[25] = 1    // two formats
			buf[26] = 0x01 // format 1 in use
			le16(buf, 102, m.endgid)
			le32(buf, 128, 9<<16)
			le32(buf, 132, uint32(m.lbads)<<16|uint32(m.ms))
		case cnsController:
			buf[77] = m.mdts
			le32(buf, 96, m.ctratt)
		case cnsCtrlCSINVM:
			le32(buf, 4, m.dmrsl)
		default:
			return 0, &StatusError{Opcode: c.opcode, Admin: true, Status: 0x02}
		}
		return 0, nil
	case adminGetFeature:
		if c.cdw10&0xff != featFDP || c.cdw11 != uint32(m.endgid) {
			return 0, &StatusError{Opcode: c.opcode, Admin: true, Status: 0x02}
		}
		v := uint64(m.confIdx) << 8
		if m.fdpEnabled {
			v |= 1
		}
		return v, nil
	case adminGetLogPage:
		if m.noLogs {
			return 0, &StatusError{Opcode: c.opcode, Admin: true, Status: 0x4009} // invalid log page, DNR
		}
		lid := uint8(c.cdw10)
		numd := (c.cdw10>>16 | c.cdw11<<16) + 1
		if int(numd)*4 != len(buf) || uint16(c.cdw11>>16) != m.endgid {
			return 0, fmt.Errorf("get log %#x: numd %d for %d bytes, lsi %d", lid, numd, len(buf), c.cdw11>>16)
		}
		var log []byte
		switch lid {
		case logFDPConfigs:
			// Configuration 0 is a decoy; the model uses confIdx.
			d0 := fdpConfigDesc(0x80, 2, []uint8{1}, 1<<20, 0)
			d1 := fdpConfigDesc(0x80, 1, make([]uint8, 8), m.runs, 4)
			log = make([]byte, 16)
			log = append(append(log, d0...), d1...)
			le16(log, 0, 1)
			le32(log, 4, uint32(len(log)))
		case logFDPStats:
			log = make([]byte, 64)
			le64(log, 0, m.hbmw)
			le64(log, 16, m.mbmw)
		default:
			return 0, &StatusError{Opcode: c.opcode, Admin: true, Status: 0x09}
		}
		clear(buf)
		copy(buf, log)
		return 0, nil
	}
	return 0, fmt.Errorf("admin opcode %#x", c.opcode)
}

func (m *ctrlModel) mgmtRecv(c *passthru64, buf []byte) (uint64, error) {
	if c.cdw10 != ioMgmtRecvRU || int(c.cdw11+1)*4 != len(buf) {
		return 0, fmt.Errorf("io mgmt recv cdw10 %#x cdw11 %d for %d bytes", c.cdw10, c.cdw11, len(buf))
	}
	clear(buf)
	le16(buf, 14, uint16(len(m.ruhs)))
	for i, r := range m.ruhs {
		off := 16 + 32*i
		if off+32 > len(buf) {
			break // as a controller does: the host sees the count and asks again
		}
		le16(buf, off, r.PID)
		le16(buf, off+2, r.RUHID)
		le64(buf, off+8, r.RUAMW)
	}
	return 0, nil
}

func fdpModel() *ctrlModel {
	m := &ctrlModel{
		nsid: 1, nsze: 1 << 18, lbads: 12, endgid: 1, mdts: 5, ctratt: ctrattFDP,
		dmrsl: 4096, fdpEnabled: true, confIdx: 1, runs: 8 << 20,
		hbmw: 3 << 20, mbmw: 6 << 20,
	}
	// More handles than one page of descriptors holds, in an order that is
	// not the placement identifiers' own.
	for i := range 200 {
		m.ruhs = append(m.ruhs, RUHStatus{PID: uint16(199 - i), RUHID: uint16(i % 8), RUAMW: uint64(2048 - i)})
	}
	return m
}

func identifyWith(m *ctrlModel) (*Device, error) {
	ns := &memNS{nsid: m.nsid, shift: uint(m.lbads), maxBytes: 1 << 20, ctrl: m}
	d := &Device{path: "test", nsid: m.nsid, submitFn: ns.submit}
	return d, d.identify()
}

func TestIdentifyFDP(t *testing.T) {
	m := fdpModel()
	d, err := identifyWith(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.SectorSize() != 4096 || d.Size() != 1<<30 || d.chunk != 128<<10 || d.dsmRange != 4096 {
		t.Errorf("geometry: sector %d size %d chunk %d dmrsl %d", d.SectorSize(), d.Size(), d.chunk, d.dsmRange)
	}
	if d.MaxStreams() != 200 {
		t.Fatalf("MaxStreams = %d, want 200", d.MaxStreams())
	}
	info := d.FDPInfo()
	if !info.Enabled || info.ConfigIndex != 1 || info.ReclaimGroups != 1 || info.ReclaimUnitHandles != 8 ||
		info.ReclaimUnitSize != 8<<20 || info.EnduranceGroup != 1 || info.LBASize != 4096 {
		t.Errorf("info %+v", info)
	}
	// Stream N is the N-th listed placement identifier, as listed.
	if info.PlacementIDs[0] != 199 || info.PlacementIDs[199] != 0 {
		t.Errorf("placement ids %v...", info.PlacementIDs[:4])
	}
	info.PlacementIDs[0] = 7 // a copy: the device's mapping stays
	if pid, placed, _ := d.placement(1); !placed || pid != 199 {
		t.Errorf("stream 1 -> pid %d placed %v", pid, placed)
	}

	st, err := d.FDPStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Handles) != 200 || st.HostBytesWritten != 3<<20 || st.MediaBytesWritten != 6<<20 || st.WAF != 2 {
		t.Errorf("stats: %d handles, %+v", len(st.Handles), st)
	}
	h := st.Handles[5]
	if h.PID != 194 || h.Stream != 6 || h.RUAMW != 2043 || h.AvailableBytes != 2043*4096 {
		t.Errorf("handle 5: %+v", h)
	}
}

func TestIdentifyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*ctrlModel)
		want   error
	}{
		{"no FDP in CTRATT", func(m *ctrlModel) { m.ctratt = 1 << 18 }, ErrNoFDP},
		{"FDP disabled", func(m *ctrlModel) { m.fdpEnabled = false }, ErrNoFDP},
		{"no handles", func(m *ctrlModel) { m.ruhs = nil }, ErrNoFDP},
		{"metadata", func(m *ctrlModel) { m.ms = 8 }, ErrFormat},
		{"2 KiB blocks", func(m *ctrlModel) { m.lbads = 11 }, ErrFormat},
	} {
		m := fdpModel()
		tc.change(m)
		if _, err := identifyWith(m); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A controller error is reported with its status, not as "no FDP".
	m := fdpModel()
	m.noLogs = true
	_, err := identifyWith(m)
	var se *StatusError
	if err == nil || errors.Is(err, ErrNoFDP) || !errors.As(err, &se) {
		t.Errorf("failing log page: %v", err)
	}
}

package meta

import "encoding/binary"

func le32(b []byte) uint32  { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64  { return binary.LittleEndian.Uint64(b) }
func be32(b []byte) uint32  { return binary.BigEndian.Uint32(b) }
func put32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func put64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

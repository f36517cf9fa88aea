// Package checkpoint holds the on-disk shape of the device manager's
// checkpoint, kubelet_internal_checkpoint, as upstream kubelet writes it.
//
// The package is named checkpoint and its types are named as upstream's
// because the checksum is an FNV-32a hash over a Go-syntax printing of the
// data that includes the package and type names; with the same names and
// field layout the hash is the one upstream computes, so nodekit and
// kubelet can read each other's files.
package checkpoint

import (
	"encoding/json"
	"fmt"

	"github.com/nodekit/nodekit/internal/ckpt"
)

// DevicesPerNUMA is the device IDs of one allocation keyed by NUMA node
// (-1 for devices without topology).
type DevicesPerNUMA map[int64][]string

// PodDevicesEntry is the allocation of one resource to one container.
// AllocResp is the plugin's ContainerAllocateResponse in protobuf wire
// format.
type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

// checkpointData is unexported, as upstream's; its name is part of the
// checksum.
type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

// Checksum mirrors upstream's checksum.Checksum (a uint64 in the JSON).
type Checksum uint64

// File is the whole checkpoint file: {"Data":{...},"Checksum":N}.
type File struct {
	Data     checkpointData
	Checksum Checksum
}

// Marshal renders entries and the registered (healthy) devices per
// resource, with upstream's checksum.
func Marshal(entries []PodDevicesEntry, registered map[string][]string) ([]byte, error) {
	f := File{Data: checkpointData{PodDeviceEntries: entries, RegisteredDevices: registered}}
	f.Checksum = sum(f.Data)
	return json.Marshal(f)
}

// Unmarshal parses a checkpoint and verifies its checksum; an error means
// the file is corrupt.
func Unmarshal(b []byte) (entries []PodDevicesEntry, registered map[string][]string, err error) {
	// Decode into the same zero values upstream decodes into, so the
	// printed form (nil or empty) and thus the checksum agree.
	f := File{Data: checkpointData{PodDeviceEntries: []PodDevicesEntry{}, RegisteredDevices: map[string][]string{}}}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if got := sum(f.Data); got != f.Checksum {
		return nil, nil, fmt.Errorf("checksum %d in the file, %d computed from its content", f.Checksum, got)
	}
	return f.Data.PodDeviceEntries, f.Data.RegisteredDevices, nil
}

// sum is upstream's checksum: FNV-32a over the hash printing of the data.
func sum(d checkpointData) Checksum {
	return Checksum(ckpt.Checksum(d))
}

package memorymanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/utils/dump"

	"github.com/nodekit/nodekit/internal/ckpt"
)

// StateFileName is the checkpoint's name under Config.StateDir, as upstream.
const StateFileName = "memory_manager_state"

// ErrCorruptCheckpoint is wrapped by the error for a checkpoint whose
// checksum does not match its content.
var ErrCorruptCheckpoint = errors.New("checkpoint is corrupted")

// The file is upstream's v3 checkpoint: the authoritative payload is the
// JSON string Data with DataChecksum (FNV-32a of Data as upstream's
// checkpoint manager prints it); the top level repeats it in the v1 layout,
// with the v1 checksum, for older kubelets.
type checkpointFile struct {
	PolicyName   string               `json:"policyName"`
	MachineState numaNodeMap          `json:"machineState"`
	Entries      containerAssignments `json:"entries,omitempty"`
	Checksum     uint64               `json:"checksum"`
	Data         string               `json:"data"`
	DataChecksum uint64               `json:"dataChecksum"`
	// PodEntries appear in v2 files (pod-level resource managers), which
	// nodekit refuses when they hold any.
	PodEntries map[string]json.RawMessage `json:"podEntries,omitempty"`
}

type checkpointData struct {
	PolicyName   string                     `json:"policyName"`
	MachineState numaNodeMap                `json:"machineState"`
	Entries      containerAssignments       `json:"entries,omitempty"`
	PodEntries   map[string]json.RawMessage `json:"podEntries,omitempty"`
}

func encodeCheckpoint(policy string, st state) ([]byte, error) {
	machine, entries := st.machine, st.assignments
	if machine == nil {
		machine = numaNodeMap{}
	}
	if entries == nil {
		entries = containerAssignments{}
	}
	data, err := json.Marshal(checkpointData{PolicyName: policy, MachineState: machine, Entries: entries})
	if err != nil {
		return nil, fmt.Errorf("failed to serialize memory manager checkpoint data: %w", err)
	}
	f := checkpointFile{PolicyName: policy, MachineState: machine, Entries: entries, Data: string(data), DataChecksum: ckpt.Checksum(string(data))}
	f.Checksum = legacyChecksum(f, false)
	return json.Marshal(f)
}

func decodeCheckpoint(b []byte) (policy string, st state, err error) {
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return "", st, err
	}
	var d checkpointData
	if f.Data != "" || f.DataChecksum != 0 {
		if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
			return "", st, fmt.Errorf("could not load v3 checkpoint: failed to deserialize memory manager checkpoint data: %w", err)
		}
		if ckpt.Checksum(f.Data) != f.DataChecksum {
			return "", st, fmt.Errorf("could not load v3 checkpoint: %w", ErrCorruptCheckpoint)
		}
		if len(d.PodEntries) > 0 {
			return "", st, fmt.Errorf("checkpoint holds pod-level memory assignments (podEntries), which nodekit does not support")
		}
	} else {
		if len(f.PodEntries) > 0 {
			return "", st, fmt.Errorf("checkpoint holds pod-level memory assignments (podEntries), which nodekit does not support")
		}
		if f.Checksum != 0 && f.Checksum != legacyChecksum(f, false) && f.Checksum != legacyChecksum(f, true) {
			return "", st, ErrCorruptCheckpoint
		}
		d = checkpointData{PolicyName: f.PolicyName, MachineState: f.MachineState, Entries: f.Entries}
	}
	st = state{machine: d.MachineState, assignments: d.Entries}
	if st.machine == nil {
		st.machine = numaNodeMap{}
	}
	if st.assignments == nil {
		st.assignments = containerAssignments{}
	}
	for id, n := range st.machine {
		if n == nil {
			return "", st, fmt.Errorf("NUMA node %d has no state", id)
		}
	}
	return d.PolicyName, st, nil
}

// Mirror types of upstream's v1 and v2 checkpoint structs for the legacy
// checksum, which hashes their printing, type names included.
type (
	legacyCheckpointV1 struct {
		PolicyName   string
		MachineState numaNodeMap
		Entries      containerAssignments
		Checksum     legacyChecksumType
	}
	legacyCheckpointV2 struct {
		PolicyName   string
		MachineState numaNodeMap
		Entries      containerAssignments
		PodEntries   legacyPodEntries
		Checksum     legacyChecksumType
	}
	legacyChecksumType uint64
	legacyPodEntries   map[string]struct{}
)

var legacyNames = strings.NewReplacer(
	"memorymanager.legacyCheckpointV1", "state.MemoryManagerCheckpoint",
	"memorymanager.legacyCheckpointV2", "state.MemoryManagerCheckpoint",
	"memorymanager.legacyChecksumType", "checksum.Checksum",
	"memorymanager.legacyPodEntries", "state.PodMemoryAssignments",
	"memorymanager.numaNodeMap", "state.NUMANodeMap",
	"memorymanager.numaNodeState", "state.NUMANodeState",
	"memorymanager.memoryTable", "state.MemoryTable",
	"memorymanager.containerAssignments", "state.ContainerMemoryAssignments",
	"memorymanager.Block", "state.Block",
)

func legacyChecksum(f checkpointFile, v2 bool) uint64 {
	machine, entries := f.MachineState, f.Entries
	if machine == nil {
		machine = numaNodeMap{}
	}
	if entries == nil {
		entries = containerAssignments{}
	}
	var obj any = &legacyCheckpointV1{PolicyName: f.PolicyName, MachineState: machine, Entries: entries}
	if v2 {
		obj = &legacyCheckpointV2{PolicyName: f.PolicyName, MachineState: machine, Entries: entries, PodEntries: legacyPodEntries{}}
	}
	return ckpt.ChecksumPrinted(legacyNames.Replace(dump.ForHash(obj)))
}

func readCheckpoint(path string) (policy string, st state, found bool, err error) {
	b, found, err := ckpt.Read(path)
	if err != nil || !found {
		return "", state{machine: numaNodeMap{}, assignments: containerAssignments{}}, false, err
	}
	policy, st, err = decodeCheckpoint(b)
	return policy, st, true, err
}

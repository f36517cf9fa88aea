package cpumanager

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"k8s.io/utils/cpuset"
	"k8s.io/utils/dump"

	"github.com/nodekit/nodekit/internal/ckpt"
)

// StateFileName is the checkpoint's name under Config.StateDir, as upstream.
const StateFileName = "cpu_manager_state"

// state is what the CPU manager has handed out: the shared pool and the
// exclusive CPUs of each container, by pod UID and container name.
type state struct {
	defaultSet  cpuset.CPUSet
	assignments map[string]map[string]cpuset.CPUSet
}

func newState() state {
	return state{defaultSet: cpuset.New(), assignments: map[string]map[string]cpuset.CPUSet{}}
}

func (s state) clone() state {
	c := state{defaultSet: s.defaultSet, assignments: make(map[string]map[string]cpuset.CPUSet, len(s.assignments))}
	for pod, containers := range s.assignments {
		c.assignments[pod] = maps.Clone(containers)
	}
	return c
}

func (s state) get(pod, container string) (cpuset.CPUSet, bool) {
	cpus, ok := s.assignments[pod][container]
	return cpus, ok
}

func (s state) set(pod, container string, cpus cpuset.CPUSet) {
	if s.assignments[pod] == nil {
		s.assignments[pod] = map[string]cpuset.CPUSet{}
	}
	s.assignments[pod][container] = cpus
}

func (s state) remove(pod, container string) {
	delete(s.assignments[pod], container)
	if len(s.assignments[pod]) == 0 {
		delete(s.assignments, pod)
	}
}

// The file is upstream's v4 checkpoint: the authoritative payload is the
// JSON string Data with DataChecksum, the FNV-32a hash of Data as upstream's
// checkpoint manager prints it; the top-level policyName, defaultCpuSet,
// entries and checksum repeat it in the v2 layout for older kubelets.
type checkpointFile struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      uint64                       `json:"checksum"`
	Data          string                       `json:"data"`
	DataChecksum  uint64                       `json:"dataChecksum"`
	// PodEntries appear in v3 files (pod-level resource managers); nodekit
	// has no use for them and refuses a legacy file that holds any.
	PodEntries map[string]json.RawMessage `json:"podEntries,omitempty"`
}

type checkpointData struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
}

// ErrCorruptCheckpoint is wrapped by the error for a checkpoint whose
// checksum does not match its content.
var ErrCorruptCheckpoint = errors.New("checkpoint is corrupted")

// encodeCheckpoint renders st for policy in upstream's v4 format.
func encodeCheckpoint(policy string, st state) ([]byte, error) {
	entries := make(map[string]map[string]string, len(st.assignments))
	for pod, containers := range st.assignments {
		entries[pod] = make(map[string]string, len(containers))
		for name, cpus := range containers {
			entries[pod][name] = cpus.String()
		}
	}
	data, err := json.Marshal(checkpointData{PolicyName: policy, DefaultCPUSet: st.defaultSet.String(), Entries: entries})
	if err != nil {
		return nil, fmt.Errorf("failed to serialize cpu manager checkpoint data: %w", err)
	}
	f := checkpointFile{
		PolicyName: policy, DefaultCPUSet: st.defaultSet.String(), Entries: entries,
		Data: string(data), DataChecksum: ckpt.Checksum(string(data)),
	}
	f.Checksum = legacyChecksum(f, "CPUManagerCheckpoint", false)
	return json.Marshal(f)
}

// decodeCheckpoint parses a checkpoint written by nodekit or by upstream
// kubelet (v4, or the older v3/v2 layouts), verifying its checksum.
func decodeCheckpoint(b []byte) (policy string, st state, err error) {
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return "", st, err
	}
	var d checkpointData
	if f.Data != "" || f.DataChecksum != 0 {
		if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
			return "", st, fmt.Errorf("could not load v4 checkpoint: failed to deserialize cpu manager checkpoint data: %w", err)
		}
		if ckpt.Checksum(f.Data) != f.DataChecksum {
			return "", st, fmt.Errorf("could not load v4 checkpoint: %w", ErrCorruptCheckpoint)
		}
	} else {
		if len(f.PodEntries) > 0 {
			return "", st, fmt.Errorf("checkpoint holds pod-level CPU assignments (podEntries), which nodekit does not support")
		}
		ok := f.Checksum == 0 // upstream accepts an empty checksum from its old file backend
		for _, name := range []string{"CPUManagerCheckpoint", "CPUManagerCheckpointV3"} {
			for _, v3 := range []bool{false, true} {
				ok = ok || legacyChecksum(f, name, v3) == f.Checksum
			}
		}
		if !ok {
			return "", st, ErrCorruptCheckpoint
		}
		d = checkpointData{PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet, Entries: f.Entries}
	}
	st = newState()
	if st.defaultSet, err = cpuset.Parse(d.DefaultCPUSet); err != nil {
		return "", st, fmt.Errorf("could not parse default CPU set %q: %w", d.DefaultCPUSet, err)
	}
	for pod, containers := range d.Entries {
		for name, s := range containers {
			cpus, err := cpuset.Parse(s)
			if err != nil {
				return "", st, fmt.Errorf("could not parse cpuset %q for container %q in pod %q: %w", s, name, pod, err)
			}
			st.set(pod, name, cpus)
		}
	}
	return d.PolicyName, st, nil
}

// The legacy checksum is FNV-32a over upstream's hash printing of its v2
// (or v3) checkpoint struct, whose type names the printing includes. These
// mirror types have the same shape; legacyChecksum renames them.
type (
	legacyCheckpointV2 struct {
		PolicyName    string
		DefaultCPUSet string
		Entries       map[string]map[string]string
		Checksum      legacyChecksumType
	}
	legacyCheckpointV3 struct {
		PolicyName    string
		DefaultCPUSet string
		Entries       map[string]map[string]string
		PodEntries    legacyPodEntries
		Checksum      legacyChecksumType
	}
	legacyChecksumType uint64
	legacyPodEntries   map[string]struct{}
)

func legacyChecksum(f checkpointFile, typeName string, v3 bool) uint64 {
	entries := f.Entries
	if entries == nil {
		entries = map[string]map[string]string{}
	}
	var obj any = &legacyCheckpointV2{PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet, Entries: entries}
	if v3 {
		obj = &legacyCheckpointV3{PolicyName: f.PolicyName, DefaultCPUSet: f.DefaultCPUSet, Entries: entries, PodEntries: legacyPodEntries{}}
	}
	s := strings.NewReplacer(
		"cpumanager.legacyCheckpointV2", "state."+typeName,
		"cpumanager.legacyCheckpointV3", "state."+typeName,
		"cpumanager.legacyChecksumType", "checksum.Checksum",
		"cpumanager.legacyPodEntries", "state.PodCPUAssignments",
	).Replace(dump.ForHash(obj))
	return ckpt.ChecksumPrinted(s)
}

// readCheckpoint loads the checkpoint at path; a missing file is found=false.
func readCheckpoint(path string) (policy string, st state, found bool, err error) {
	b, found, err := ckpt.Read(path)
	if err != nil || !found {
		return "", newState(), false, err
	}
	policy, st, err = decodeCheckpoint(b)
	return policy, st, true, err
}

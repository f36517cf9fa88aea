package memorymanager

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/ckpt"
)

// Upstream kubelet v1.37's memory manager checkpoints (fixtures of its
// state_checkpoint_test.go), so kubelet and a nodekit agent can take over
// from each other.
const (
	fixtureMachine = `"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}}`
	fixtureEntries = `"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}}`
	fixtureData    = `"data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}"`
)

func fixtureState() state {
	return state{
		machine: numaNodeMap{0: {MemoryMap: map[v1.ResourceName]*memoryTable{
			v1.ResourceMemory: {TotalMemSize: 2048, SystemReserved: 512, Allocatable: 1536, Reserved: 512, Free: 1024},
		}, Cells: []int{}}},
		assignments: containerAssignments{"pod": {"container1": {{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 512}}}},
	}
}

func TestDecodeUpstreamCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		name, file, err string
	}{
		{"v3; the v1 part is ignored", `{"policyName":"other","machineState":{},"checksum":1234,` + fixtureData + `,"dataChecksum":1849615440}`, ""},
		{"v1 (migration)", `{"policyName":"static",` + fixtureMachine + `,` + fixtureEntries + `,"checksum":4215593881}`, ""},
		{"v1 with zeroed checksum", `{"policyName":"static",` + fixtureMachine + `,` + fixtureEntries + `,"checksum":0}`, ""},
		{"v1 with a wrong checksum", `{"policyName":"static",` + fixtureMachine + `,` + fixtureEntries + `,"checksum":101010}`, "checkpoint is corrupted"},
		{"v3 without data", `{"policyName":"static",` + fixtureMachine + `,"checksum":4215593881,"dataChecksum":1234}`,
			"could not load v3 checkpoint: failed to deserialize memory manager checkpoint data: unexpected end of JSON input"},
		{"v3 without dataChecksum", `{"policyName":"static","checksum":4215593881,` + fixtureData + `}`, "could not load v3 checkpoint: checkpoint is corrupted"},
		{"v3 with a wrong dataChecksum", `{"policyName":"static","checksum":4215593881,` + fixtureData + `,"dataChecksum":1234}`, "could not load v3 checkpoint: checkpoint is corrupted"},
		{"truncated", `{`, "unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, st, err := decodeCheckpoint([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := fixtureState(); policy != "static" || !reflect.DeepEqual(st, want) {
				t.Fatalf("decoded %q %+v", policy, st)
			}
		})
	}
}

func TestEncodeRoundTripAndChecksums(t *testing.T) {
	st := fixtureState()
	b, err := encodeCheckpoint("static", st)
	if err != nil {
		t.Fatal(err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	// The v1 part carries upstream's v1 checksum: the fixture's.
	if f.Checksum != 4215593881 || f.DataChecksum != ckpt.Checksum(f.Data) {
		t.Errorf("checksums %d/%d in %s", f.Checksum, f.DataChecksum, b)
	}
	policy, back, err := decodeCheckpoint(b)
	if err != nil || policy != "static" || !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip: %q %+v %v", policy, back, err)
	}
	// Every truncation and a tampered payload are errors, never panics.
	for i := 0; i < len(b); i++ {
		if _, _, err := decodeCheckpoint(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
	path := filepath.Join(t.TempDir(), StateFileName)
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), `\"free\":1024`, `\"free\":2048`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := readCheckpoint(path); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("tampered: %v", err)
	}
}

package cpumanager

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nodekit/nodekit/internal/ckpt"
	"github.com/nodekit/nodekit/internal/fsutil"
)

// Checkpoints as upstream kubelet v1.37 writes and reads them (the
// fixtures of its state_checkpoint_test.go), so a node can switch between
// kubelet and a nodekit agent.
func TestDecodeUpstreamCheckpoints(t *testing.T) {
	const data = `"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}"`
	const legacy = `"policyName": "static", "defaultCPUSet": "7-9", "entries": {"pod": {"container1": "4-6", "container2": "1-3"}}`
	want := newState()
	want.defaultSet = cpuset.New(7, 8, 9)
	want.set("pod", "container1", cpuset.New(4, 5, 6))
	want.set("pod", "container2", cpuset.New(1, 2, 3))
	for _, tc := range []struct {
		name, file string
		err        string
	}{
		{"v4; the v2 part is ignored", `{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234, ` + data + `, "dataChecksum": 1420829534}`, ""},
		{"v2 (migration)", `{` + legacy + `, "checksum": 1942532442}`, ""},
		{"v2 written by a v4 writer", `{` + legacy + `, "checksum": 964019483}`, ""},
		{"v4 without data", `{` + legacy + `, "checksum": 1942532442, "dataChecksum": 1234}`,
			"could not load v4 checkpoint: failed to deserialize cpu manager checkpoint data: unexpected end of JSON input"},
		{"v4 without dataChecksum", `{` + legacy + `, "checksum": 1942532442, ` + data + `}`, "could not load v4 checkpoint: checkpoint is corrupted"},
		{"v4 with a wrong dataChecksum", `{` + legacy + `, "checksum": 1942532442, ` + data + `, "dataChecksum": 1234}`, "could not load v4 checkpoint: checkpoint is corrupted"},
		{"v2 with a wrong checksum", `{"policyName": "none", "defaultCPUSet": "1-3", "checksum": 1694838852}`, "checkpoint is corrupted"},
		{"truncated", `{`, "unexpected end of JSON input"},
		{"v1 entries", `{"policyName": "static", "defaultCPUSet": "7-9", "entries": {"containerID1": "4-6"}, "checksum": 2026311253}`, "cannot unmarshal string"},
		{"unparsable default set", `{"policyName": "none", "defaultCPUSet": "7-9", "checksum": 98002435, "data": "{\"policyName\":\"none\",\"defaultCPUSet\":\"1.3\"}", "dataChecksum": 3033143655}`,
			`could not parse default CPU set "1.3": strconv.Atoi: parsing "1.3": invalid syntax`},
		{"unparsable entry", `{"policyName": "static", "defaultCPUSet": "1-3", "checksum": 1659543133, "data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"1-3\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"asd\"}}}", "dataChecksum": 3794806925}`,
			`could not parse cpuset "asd" for container "container2" in pod "pod": strconv.Atoi: parsing "asd": invalid syntax`},
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
			if policy != "static" || !statesEqual(st, want) {
				t.Fatalf("decoded %q %+v, want static %+v", policy, st, want)
			}
		})
	}
}

func TestEncodeWritesUpstreamChecksums(t *testing.T) {
	st := newState()
	st.defaultSet = cpuset.New(7, 8, 9)
	st.set("pod", "container1", cpuset.New(4, 5, 6))
	st.set("pod", "container2", cpuset.New(1, 2, 3))
	b, err := encodeCheckpoint("static", st)
	if err != nil {
		t.Fatal(err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	// The v2 part carries the checksum upstream's v4 writer computes for
	// it (its v2 struct hashed under the name CPUManagerCheckpoint), so
	// older kubelets can read the file. The same hashing with upstream's v3
	// struct reproduces the fixture checksum 1942532442 decoded above.
	if f.Checksum != 964019483 {
		t.Errorf("legacy checksum %d, want 964019483", f.Checksum)
	}
	if got := legacyChecksum(f, "CPUManagerCheckpointV3", true); got != 1942532442 {
		t.Errorf("v3 checksum %d, want upstream's 1942532442", got)
	}
	if f.DataChecksum != ckpt.Checksum(f.Data) || !strings.Contains(string(b), `"defaultCpuSet":"7-9"`) {
		t.Errorf("file %s", b)
	}
	policy, back, err := decodeCheckpoint(b)
	if err != nil || policy != "static" || !statesEqual(back, st) {
		t.Fatalf("round trip: %q %+v %v", policy, back, err)
	}
}

func TestCheckpointFileCorruption(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateFileName)
	st := newState()
	st.defaultSet = cpuset.New(0, 1)
	b, err := encodeCheckpoint("static", st)
	if err != nil {
		t.Fatal(err)
	}
	if err := fsutil.WriteFileAtomic(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, got, found, err := readCheckpoint(path); err != nil || !found || !statesEqual(got, st) {
		t.Fatalf("read back %+v found=%t err=%v", got, found, err)
	}
	// Flip one byte of the payload; and try every truncation: never a
	// panic, always an error.
	tampered := strings.Replace(string(b), `\"defaultCpuSet\":\"0-1\"`, `\"defaultCpuSet\":\"0-2\"`, 1)
	if tampered == string(b) {
		t.Fatalf("nothing tampered in %s", b)
	}
	if err := os.WriteFile(path, []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := readCheckpoint(path); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("tampered file: %v", err)
	}
	for i := 0; i < len(b); i++ {
		if _, _, err := decodeCheckpoint(b[:i]); err == nil {
			t.Fatalf("truncated to %d bytes %q: no error", i, b[:i])
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func statesEqual(a, b state) bool {
	if !a.defaultSet.Equals(b.defaultSet) || len(a.assignments) != len(b.assignments) {
		return false
	}
	for pod, containers := range a.assignments {
		if len(containers) != len(b.assignments[pod]) {
			return false
		}
		for name, cpus := range containers {
			if other, ok := b.get(pod, name); !ok || !other.Equals(cpus) {
				return false
			}
		}
	}
	return true
}

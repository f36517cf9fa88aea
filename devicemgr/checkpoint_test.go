package devicemgr

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/devicemgr/internal/checkpoint"
)

// The files in testdata were written by upstream kubelet v1.37.2's
// checkpoint code (devicemanager/checkpoint with checkpointmanager's
// checksum): reading them verifies the checksum, and writing the same
// data gives the same bytes.
func TestCheckpointUpstreamFormat(t *testing.T) {
	for _, name := range []string{"upstream_full.json", "upstream_empty.json"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			entries, registered, err := checkpoint.Unmarshal(b)
			if err != nil {
				t.Fatalf("upstream checkpoint rejected: %v", err)
			}
			out, err := checkpoint.Marshal(entries, registered)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, b) {
				t.Errorf("rewritten checkpoint differs:\n got %s\nwant %s", out, b)
			}
		})
	}
}

// An upstream checkpoint restores the allocations; its resources have no
// devices until their plugins register, and go after the grace period.
func TestRestoreUpstreamCheckpoint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("testdata", "upstream_full.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CheckpointName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := newTestManager(t, ctx, Config{Dir: dir, Clock: clk})

	pod := newPod("uid-a", nil, container("app", map[string]int{"example.com/foo": 1}))
	opts, err := m.ContainerOptions(ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := &nodekit.ContainerOptions{
		Envs:    []nodekit.EnvVar{{Name: "FAKE_DEVICES", Value: "dev-0"}},
		Devices: []nodekit.Device{{PathOnHost: "/dev/null", PathInContainer: "/dev/dev-0", Permissions: "rw"}},
	}
	if !equalOptions(opts, want) {
		t.Errorf("options = %+v, want %+v", opts, want)
	}
	capacity, alloc, removed := m.Resources()
	for _, res := range []v1.ResourceName{"example.com/foo", "example.com/bar"} {
		if c, a := capacity[res], alloc[res]; c.Value() != 0 || a.Value() != 0 {
			t.Errorf("%s: capacity %v allocatable %v before the plugin registers, want 0", res, c.String(), a.String())
		}
	}
	if len(removed) != 0 {
		t.Errorf("removed = %v", removed)
	}
	// A new pod cannot get the restored resource's devices meanwhile.
	other := newPod("uid-c", nil, container("app", map[string]int{"example.com/foo": 1}))
	podB := newPod("uid-b", nil, container("app", map[string]int{"example.com/foo": 1}))
	d := m.Admit(ctx, nodekit.AdmitRequest{Pod: other, Pods: []*v1.Pod{pod, podB}})
	if wantMsg := "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/foo, which is unexpected"; d.Admit || d.Reason != ReasonUnexpectedAdmissionError || d.Message != wantMsg {
		t.Errorf("decision = %+v, want rejection %q", d, wantMsg)
	}

	clk.Step(DefaultGracePeriod + time.Second)
	<-m.Changes()
	_, _, removed = m.Resources()
	if strings.Join(removed, ",") != "example.com/bar,example.com/foo" {
		t.Errorf("removed = %v, want both resources", removed)
	}
	if _, _, removed = m.Resources(); len(removed) != 0 {
		t.Errorf("removed reported twice: %v", removed)
	}
	// Removed resources are gone from the checkpoint; allocations stay.
	m2 := newTestManager(t, ctx, Config{Dir: dir, Clock: clk})
	if capacity, _, _ := m2.Resources(); len(capacity) != 0 {
		t.Errorf("capacity after restore = %v, want none", capacity)
	}
	if got := held(m2)["uid-b"]["app"]["example.com/foo"]; got.Len() != 1 || !got.Has("dev-1") {
		t.Errorf("uid-b holds %v, want dev-1", got)
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := newTestManager(t, ctx, Config{})
	client := &fakeClient{resource: "example.com/foo"}
	ep := attach(m, "example.com/foo", client, nil)
	m.updateDevices(ctx, ep, []*pluginapi.Device{
		{ID: "d0", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 1}}}},
		{ID: "d1", Health: pluginapi.Healthy},
		{ID: "d2", Health: pluginapi.Unhealthy},
	})
	pod := newPod("p1", nil, container("app", map[string]int{"example.com/foo": 2}))
	if d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod}); !d.Admit {
		t.Fatalf("rejected: %+v", d)
	}
	m2 := newTestManager(t, ctx, Config{Dir: m.dir})
	if a, b := held(m), held(m2); len(a) != 1 || !equalHeld(a, b) {
		t.Fatalf("restored %v, want %v", b, a)
	}
	if got := m2.pods["p1"]["app"]["example.com/foo"].numa; len(got[1]) != 1 || got[1][0] != "d0" || len(got[-1]) != 1 || got[-1][0] != "d1" {
		t.Errorf("NUMA placement = %v", got)
	}
	o1, _ := m.ContainerOptions(ctx, pod, &pod.Spec.Containers[0])
	o2, _ := m2.ContainerOptions(ctx, pod, &pod.Spec.Containers[0])
	if !equalOptions(o1, o2) || len(o1.Envs) != 1 || o1.Envs[0].Value != "d0,d1" {
		t.Errorf("options before %+v, after restart %+v", o1, o2)
	}
	// The file is a valid checkpoint listing the healthy devices.
	b, err := os.ReadFile(filepath.Join(m.dir, CheckpointName))
	if err != nil {
		t.Fatal(err)
	}
	if _, registered, err := checkpoint.Unmarshal(b); err != nil || strings.Join(registered["example.com/foo"], ",") != "d0,d1" {
		t.Errorf("registered = %v, %v", registered, err)
	}
}

func TestCorruptCheckpoint(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	valid, err := os.ReadFile(filepath.Join("testdata", "upstream_full.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"checksum":  bytes.Replace(valid, []byte(`"Checksum":1539955836`), []byte(`"Checksum":1539955837`), 1),
		"content":   bytes.Replace(valid, []byte(`"uid-a"`), []byte(`"uid-x"`), 1),
		"truncated": valid[:len(valid)/2],
		"garbage":   []byte("\x00\x01 not a checkpoint"),
		"empty":     {},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, CheckpointName)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := New(ctx, Config{Dir: dir})
			if err == nil || m != nil {
				t.Fatalf("New = %v, %v; want an error", m, err)
			}
			if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s or wrap ErrCorruptCheckpoint", err, path)
			}
		})
	}
}

func equalHeld(a, b map[string]map[string]map[string]setOfStrings) bool {
	if len(a) != len(b) {
		return false
	}
	for uid, cs := range a {
		if len(cs) != len(b[uid]) {
			return false
		}
		for c, rs := range cs {
			if len(rs) != len(b[uid][c]) {
				return false
			}
			for r, ids := range rs {
				if !ids.Equal(b[uid][c][r]) {
					return false
				}
			}
		}
	}
	return true
}

func equalOptions(a, b *nodekit.ContainerOptions) bool {
	if a == nil || b == nil {
		return a == b
	}
	return fmtOptions(a) == fmtOptions(b)
}

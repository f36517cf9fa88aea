package dra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
)

func TestSharedClaimPreparedOnceUnpreparedAfterLastPod(t *testing.T) {
	d := startDriver(t)
	d.requests["shared"] = []string{"gpu"}
	a, b := podWith("a", "", "shared"), podWith("b", "", "shared")
	cl := &claims{}
	cl.add(allocated("shared", []string{"gpu"}, a, b))
	m := newManager(t, t.TempDir(), cl, d)
	ctx := t.Context()

	for _, p := range []*v1.Pod{a, b, a} {
		if err := m.PrepareResources(ctx, p); err != nil {
			t.Fatalf("PrepareResources(%s): %v", p.Name, err)
		}
	}
	if got, _ := d.calls(); !slices.Equal(got, []string{"shared"}) {
		t.Fatalf("NodePrepareResources calls = %v, want one for the shared claim", got)
	}
	for _, p := range []*v1.Pod{a, b} {
		ids, err := m.CDIDevices(p, &p.Spec.Containers[0])
		if err != nil || !slices.Equal(ids, []string{testDriver + "/dev=shared-gpu"}) {
			t.Fatalf("CDIDevices(%s) = %v, %v", p.Name, ids, err)
		}
	}
	if err := m.UnprepareResources(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, rel := d.calls(); len(rel) != 0 {
		t.Fatalf("unprepared %v while pod b still holds the claim", rel)
	}
	if err := m.UnprepareResources(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := m.UnprepareResources(ctx, b); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, rel := d.calls(); !slices.Equal(rel, []string{"shared"}) {
		t.Fatalf("NodeUnprepareResources calls = %v, want one after the last pod", rel)
	}
	if _, err := m.CDIDevices(b, &b.Spec.Containers[0]); err == nil {
		t.Fatal("CDIDevices of an unprepared claim: no error")
	}
}

func TestRestartRestoresPreparedClaims(t *testing.T) {
	d := startDriver(t)
	d.requests["one"] = []string{"gpu"}
	d.requests["two"] = []string{"gpu"}
	a, gone := podWith("a", "", "one"), podWith("gone", "", "two")
	cl := &claims{}
	cl.add(allocated("one", []string{"gpu"}, a))
	cl.add(allocated("two", []string{"gpu"}, gone))
	root := t.TempDir()
	m := newManager(t, root, cl, d)
	for _, p := range []*v1.Pod{a, gone} {
		if err := m.PrepareResources(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
	m.closeDrivers()

	// A new agent on the same root: pod a runs on, pod gone was deleted
	// while the agent was down.
	m2, err := New(Config{RootDir: root, Claims: cl, ActivePods: func() []*v1.Pod { return []*v1.Pod{a} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.closeDrivers)
	if err := m2.RegisterPlugin(t.Context(), testDriver, d.endpoint, []string{drapb.DRAPluginService}); err != nil {
		t.Fatal(err)
	}
	ids, err := m2.CDIDevices(a, &a.Spec.Containers[0])
	if err != nil || !slices.Equal(ids, []string{testDriver + "/dev=one-gpu"}) {
		t.Fatalf("CDIDevices after restart = %v, %v", ids, err)
	}
	if err := m2.PrepareResources(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.calls(); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("NodePrepareResources calls = %v, want none after the restart", got)
	}
	m2.Reconcile(t.Context())
	if _, rel := d.calls(); !slices.Equal(rel, []string{"two"}) {
		t.Fatalf("NodeUnprepareResources calls = %v, want the gone pod's claim", rel)
	}
}

func TestPrepareWaitsForAllocationAndDriver(t *testing.T) {
	d := startDriver(t)
	a, other := podWith("a", "", "c"), podWith("other", "", "c")
	for _, tc := range []struct {
		name     string
		claim    func() *claims
		register bool
		want     string
	}{
		{"missing", func() *claims { return &claims{} }, true, "fetch ResourceClaim c"},
		{"reserved for another pod", func() *claims { c := &claims{}; c.add(allocated("c", []string{"r"}, other)); return c }, true,
			"pod a (uid-a) is not allowed to use ResourceClaim c (uid-c)"},
		{"not allocated", func() *claims {
			c := &claims{}
			cl := allocated("c", nil, a)
			cl.Status.Allocation = nil
			c.add(cl)
			return c
		}, true, "ResourceClaim c: not allocated"},
		{"driver not registered", func() *claims { c := &claims{}; c.add(allocated("c", []string{"r"}, a)); return c }, false,
			"DRA driver test.nodekit.io is not registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var drv *fakeDriver
			if tc.register {
				drv = d
			}
			m := newManager(t, t.TempDir(), tc.claim(), drv)
			err := m.PrepareResources(t.Context(), a)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PrepareResources = %v, want %q", err, tc.want)
			}
		})
	}
	if got, _ := d.calls(); len(got) != 0 {
		t.Fatalf("driver called for claims not ready: %v", got)
	}
}

func TestPrepareFailureIsRetried(t *testing.T) {
	d := startDriver(t)
	d.requests["c"] = []string{"r"}
	d.failClaim = "c"
	a := podWith("a", "", "c")
	cl := &claims{}
	cl.add(allocated("c", []string{"r"}, a))
	m := newManager(t, t.TempDir(), cl, d)
	if err := m.PrepareResources(t.Context(), a); err == nil || !strings.Contains(err.Error(), "NodePrepareResources failed for ResourceClaim c: broken device") {
		t.Fatalf("PrepareResources = %v", err)
	}
	d.mu.Lock()
	d.failClaim = ""
	d.mu.Unlock()
	if err := m.PrepareResources(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.calls(); len(got) != 2 {
		t.Fatalf("NodePrepareResources calls = %v, want the failed one and a retry", got)
	}
}

func TestCDIDevicesFilterByRequest(t *testing.T) {
	d := startDriver(t)
	d.requests["c"] = []string{"r1", "r2"}
	one, all := podWith("one", "r1", "c"), podWith("all", "", "c")
	plain := podWith("plain", "", "c")
	plain.Spec.Containers = append(plain.Spec.Containers, v1.Container{Name: "nothing"})
	cl := &claims{}
	cl.add(allocated("c", []string{"r1", "r2"}, one, all, plain))
	m := newManager(t, t.TempDir(), cl, d)
	for _, tc := range []struct {
		pod  *v1.Pod
		c    int
		want []string
	}{
		{one, 0, []string{testDriver + "/dev=c-r1"}},
		{all, 0, []string{testDriver + "/dev=c-r1", testDriver + "/dev=c-r2"}},
		{plain, 1, nil},
	} {
		if err := m.PrepareResources(t.Context(), tc.pod); err != nil {
			t.Fatal(err)
		}
		got, err := m.CDIDevices(tc.pod, &tc.pod.Spec.Containers[tc.c])
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s container %d: CDIDevices = %v, %v; want %v", tc.pod.Name, tc.c, got, err, tc.want)
		}
	}
	o, err := m.WrapOptions(nil)(t.Context(), one, &one.Spec.Containers[0], nil)
	if err != nil || o == nil || !slices.Equal(o.CDIDevices, []string{testDriver + "/dev=c-r1"}) {
		t.Fatalf("WrapOptions = %+v, %v", o, err)
	}
}

func TestCheckpointIsUpstreamFormat(t *testing.T) {
	d := startDriver(t)
	d.requests["c"] = []string{"r"}
	a := podWith("a", "", "c")
	cl := &claims{}
	cl.add(allocated("c", []string{"r"}, a))
	root := t.TempDir()
	m := newManager(t, root, cl, d)
	if err := m.PrepareResources(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	blob, err := os.ReadFile(filepath.Join(root, "dra_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Data     string
		Checksum uint32
	}
	if err := json.Unmarshal(blob, &env); err != nil || env.Checksum == 0 {
		t.Fatalf("envelope %s: %v", blob, err)
	}
	var data struct {
		Kind, APIVersion   string
		ClaimInfoStateList []map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(env.Data), &data); err != nil {
		t.Fatal(err)
	}
	if data.Kind != "DRACheckpoint" || data.APIVersion != "checkpoint.dra.kubelet.k8s.io/v1" || len(data.ClaimInfoStateList) != 1 {
		t.Fatalf("checkpoint data = %s", env.Data)
	}
	for _, k := range []string{"ClaimUID", "ClaimName", "Namespace", "PodUIDs", "DriverState"} {
		if _, ok := data.ClaimInfoStateList[0][k]; !ok {
			t.Errorf("checkpoint entry lacks upstream field %s: %s", k, env.Data)
		}
	}
	if got := string(data.ClaimInfoStateList[0]["PodUIDs"]); got != `{"uid-a":{}}` {
		t.Errorf("PodUIDs = %s, want upstream's set encoding", got)
	}
	// A corrupt file stops the manager rather than losing claims.
	if err := os.WriteFile(filepath.Join(root, "dra_manager_state"), []byte(strings.Replace(string(blob), "uid-a", "uid-b", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{RootDir: root, Claims: cl}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("New over a corrupt checkpoint = %v", err)
	}
}

func TestValidatePluginVersions(t *testing.T) {
	m := newManager(t, t.TempDir(), &claims{}, nil)
	for _, tc := range []struct {
		versions []string
		ok       bool
	}{
		{[]string{drapb.DRAPluginService}, true},
		{[]string{drapbv1beta1.DRAPluginService}, true},
		{[]string{"v1alpha4.Node", drapb.DRAPluginService}, true},
		{[]string{"v1alpha4.Node"}, false},
		{nil, false},
	} {
		if err := m.ValidatePlugin(t.Context(), testDriver, "/x.sock", tc.versions); (err == nil) != tc.ok {
			t.Errorf("ValidatePlugin(%v) = %v", tc.versions, err)
		}
	}
}

func TestDeregisteredDriverSlicesWipedAfterDelay(t *testing.T) {
	d := startDriver(t)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	wiped := make(chan string, 4)
	m, err := New(Config{RootDir: t.TempDir(), Claims: &claims{}, Clock: clk,
		Slices: SliceDeleterFunc(func(_ context.Context, driver string) error { wiped <- driver; return nil })})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if got := <-wiped; got != "" {
		t.Fatalf("start-up wipe of %q, want every driver", got)
	}
	if err := m.RegisterPlugin(ctx, testDriver, d.endpoint, []string{drapb.DRAPluginService}); err != nil {
		t.Fatal(err)
	}
	m.DeRegisterPlugin(ctx, testDriver, d.endpoint)
	clk.Step(29 * time.Second)
	if err := m.RegisterPlugin(ctx, testDriver, d.endpoint, []string{drapb.DRAPluginService}); err != nil {
		t.Fatal(err) // back within the grace period: nothing wiped
	}
	clk.Step(time.Minute)
	m.DeRegisterPlugin(ctx, testDriver, d.endpoint)
	if clk.HasWaiters() {
		clk.Step(30 * time.Second)
	}
	if got := <-wiped; got != testDriver {
		t.Fatalf("wiped %q, want %s", got, testDriver)
	}
	select {
	case got := <-wiped:
		t.Fatalf("second wipe of %q", got)
	default:
	}
}

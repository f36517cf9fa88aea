package smpatch

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// samplePod is a pod with something of every kind a patch meets: lists
// merged by a string key (conditions, containers, env), by a number
// (ports), with retainKeys (volumes), scalars merged by value
// (finalizers), replaced lists (args, tolerations) and maps.
func samplePod() *v1.Pod {
	now := metav1.NewTime(time.Date(2026, 12, 7, 1, 2, 3, 0, time.UTC))
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"app": "a", "tier": "b"}, Annotations: map[string]string{"x": "1"},
			Finalizers:      []string{"f/b", "f/a", "f/c"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "o1"}}},
		Spec: v1.PodSpec{
			NodeName: "n",
			Containers: []v1.Container{{Name: "c", Image: "busybox", Args: []string{"sleep", "3600"},
				Env:       []v1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
				Ports:     []v1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}, {ContainerPort: 443, Protocol: "TCP"}},
				Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}}},
				{Name: "d", Image: "busybox"}},
			Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "w", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp"}}}},
			Tolerations: []v1.Toleration{{Key: "k", Operator: "Exists"}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning,
			Conditions: []v1.PodCondition{
				{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: now},
				{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: now},
				{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: now}},
			PodIPs:  []v1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}},
			HostIPs: []v1.HostIP{{IP: "192.168.0.1"}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true, RestartCount: 2,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}}},
			ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "rc", ResourceClaimName: ptr("claim-1")}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// compare computes the patch both ways and fails when they differ.
func compare(t *testing.T, name string, before, after []byte, dataStruct any) {
	t.Helper()
	want, werr := strategicpatch.CreateTwoWayMergePatch(before, after, dataStruct)
	got, gerr := TwoWay(before, after, dataStruct)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("%s: error %v, strategicpatch's %v", name, gerr, werr)
	}
	if string(got) != string(want) {
		t.Errorf("%s:\n got %s\nwant %s\nbefore %s\nafter  %s", name, got, want, before, after)
	}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTwoWayAsStrategicPatch compares the patches of hand-made changes
// with apimachinery's.
func TestTwoWayAsStrategicPatch(t *testing.T) {
	later := metav1.NewTime(time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC))
	changes := map[string]func(p *v1.Pod){
		"nothing": func(*v1.Pod) {},
		"phase":   func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded },
		"condition changed": func(p *v1.Pod) {
			p.Status.Conditions[0].Status, p.Status.Conditions[0].LastTransitionTime = v1.ConditionFalse, later
		},
		"condition added": func(p *v1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue})
		},
		"condition removed":    func(p *v1.Pod) { p.Status.Conditions = p.Status.Conditions[1:] },
		"conditions reordered": func(p *v1.Pod) { c := p.Status.Conditions; c[0], c[2] = c[2], c[0] },
		"conditions gone":      func(p *v1.Pod) { p.Status.Conditions = nil },
		"pod ip removed":       func(p *v1.Pod) { p.Status.PodIPs = p.Status.PodIPs[:1] },
		"container restarted":  func(p *v1.Pod) { p.Status.ContainerStatuses[0].RestartCount++ },
		"claim status changed": func(p *v1.Pod) { p.Status.ResourceClaimStatuses[0].ResourceClaimName = ptr("claim-2") },
		"claim status emptied": func(p *v1.Pod) { p.Status.ResourceClaimStatuses[0].ResourceClaimName = nil },
		"label changed":        func(p *v1.Pod) { p.Labels["app"] = "z" },
		"label removed":        func(p *v1.Pod) { delete(p.Labels, "tier") },
		"finalizer removed":    func(p *v1.Pod) { p.Finalizers = []string{"f/b", "f/c"} },
		"finalizer added":      func(p *v1.Pod) { p.Finalizers = append(p.Finalizers, "f/0") },
		"finalizers same":      func(p *v1.Pod) { p.Finalizers = []string{"f/b", "f/a", "f/c"} },
		"finalizers repeated":  func(p *v1.Pod) { p.Finalizers = []string{"f/z"} },
		"env changed":          func(p *v1.Pod) { p.Spec.Containers[0].Env[1].Value = "3" },
		"port removed":         func(p *v1.Pod) { p.Spec.Containers[0].Ports = p.Spec.Containers[0].Ports[1:] },
		"port added": func(p *v1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{ContainerPort: 8080})
		},
		"args changed": func(p *v1.Pod) { p.Spec.Containers[0].Args = []string{"sleep", "1"} },
		"volume source swapped": func(p *v1.Pod) {
			p.Spec.Volumes[0].VolumeSource = v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}
		},
		"container removed": func(p *v1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] },
		"owner removed":     func(p *v1.Pod) { p.OwnerReferences = nil },
		"limit changed": func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
		},
	}
	for name, change := range changes {
		before := samplePod()
		after := samplePod()
		change(after)
		compare(t, name, marshal(t, before), marshal(t, after), v1.Pod{})
		compare(t, name+" (backwards)", marshal(t, after), marshal(t, before), &v1.Pod{})
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		Addresses:  []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}, {Type: v1.NodeHostName, Address: "n"}},
		Capacity:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")},
		Images:     []v1.ContainerImage{{Names: []string{"busybox"}, SizeBytes: 1 << 40}}}}
	next := node.DeepCopy()
	next.Status.Conditions[0].Status = v1.ConditionFalse
	next.Status.Capacity[v1.ResourceMemory] = resource.MustParse("1Gi")
	next.Status.Images[0].SizeBytes++
	next.Status.VolumesInUse = []v1.UniqueVolumeName{"b", "a"}
	compare(t, "node", marshal(t, node), marshal(t, next), v1.Node{})
	compare(t, "node (backwards)", marshal(t, next), marshal(t, node), v1.Node{})
	compare(t, "empty documents", nil, nil, v1.Pod{})
	compare(t, "from empty", nil, marshal(t, node), v1.Node{})
}

func TestTwoWayRefusesWhatIsNotAStruct(t *testing.T) {
	if _, err := TwoWay([]byte(`{}`), []byte(`{}`), map[string]any{}); err == nil {
		t.Error("a map as the data type: no error")
	}
	if _, err := TwoWay([]byte(`{`), []byte(`{}`), v1.Pod{}); err == nil {
		t.Error("a bad original document: no error")
	}
}

// TestTwoWayRandomChanges compares the patches of random changes to the
// sample pod's JSON with apimachinery's.
func TestTwoWayRandomChanges(t *testing.T) {
	for seed := range uint64(3000) {
		checkRandom(t, seed, seed*7919)
	}
}

// FuzzTwoWay compares the patches of changes the fuzzer picks.
func FuzzTwoWay(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(checkRandom)
}

func checkRandom(t *testing.T, s1, s2 uint64) {
	r := rand.New(rand.NewPCG(s1, s2))
	var doc map[string]any
	if err := json.Unmarshal(marshal(t, samplePod()), &doc); err != nil {
		t.Fatal(err)
	}
	before := marshal(t, doc)
	for range 1 + r.IntN(4) {
		mutate(r, doc)
	}
	after := marshal(t, doc)
	if r.IntN(2) == 0 {
		before, after = after, before
	}
	compare(t, fmt.Sprintf("seed %d,%d", s1, s2), before, after, v1.Pod{})
}

// mutate makes one random change somewhere in v: a field removed or
// changed, a list element removed, duplicated or moved.
func mutate(r *rand.Rand, v any) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sortStrings(keys)
		k := keys[r.IntN(len(keys))]
		switch c := x[k].(type) {
		case map[string]any, []any:
			if r.IntN(4) == 0 {
				delete(x, k)
				return
			}
			mutate(r, c)
			if l, ok := c.([]any); ok {
				x[k] = mutateList(r, l)
			}
		default:
			switch r.IntN(3) {
			case 0:
				delete(x, k)
			case 1:
				x[k] = fmt.Sprint("changed-", r.IntN(3))
			default:
				x[k] = float64(r.IntN(5))
			}
		}
	case []any:
		if len(x) > 0 {
			mutate(r, x[r.IntN(len(x))])
		}
	}
}

func mutateList(r *rand.Rand, l []any) []any {
	if len(l) == 0 {
		return l
	}
	i := r.IntN(len(l))
	switch r.IntN(4) {
	case 0:
		return append(l[:i:i], l[i+1:]...)
	case 1:
		j := r.IntN(len(l))
		l[i], l[j] = l[j], l[i]
	case 2:
		if s, ok := l[i].(string); ok {
			return append(l, s+"-new")
		}
	}
	return l
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

package podconfig

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

const (
	benchPodsPerSource = 110 // upstream's default max pods per node
	benchRounds        = 16  // distinct pre-built SETs per source, cycled
)

var benchSources = []string{nodekit.SourceAPI, nodekit.SourceFile, nodekit.SourceHTTP}

// benchPod is a pod of realistic size: two containers with ports, probes,
// resources, env and mounts, labels and annotations.
func benchPod(source string, i int) *v1.Pod {
	container := func(name string) v1.Container {
		return v1.Container{
			Name:  name,
			Image: "registry.example/" + name + ":1.2.3",
			Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
			Env:   []v1.EnvVar{{Name: "MODE", Value: "prod"}, {Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}}},
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("256Mi")},
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")},
			},
			VolumeMounts:             []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			LivenessProbe:            &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10},
			TerminationMessagePath:   v1.TerminationMessagePathDefault,
			TerminationMessagePolicy: v1.TerminationMessageReadFile,
			ImagePullPolicy:          v1.PullIfNotPresent,
		}
	}
	name := fmt.Sprintf("%s-pod-%03d", source, i)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "bench", UID: types.UID(name + "-uid"), ResourceVersion: "1",
			Labels:      map[string]string{"app": name, "tier": "backend"},
			Annotations: map[string]string{"team": "edge", "version": "1"},
		},
		Spec: v1.PodSpec{
			NodeName:                      "node-1",
			Containers:                    []v1.Container{container("main"), container("sidecar")},
			Volumes:                       []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			RestartPolicy:                 v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			DNSPolicy:                     v1.DNSClusterFirst,
		},
		Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}},
	}
}

// benchSets builds benchRounds SETs per source; change alters a tenth of the
// pods of each round differently from the round before.
func benchSets(change func(p *v1.Pod, round int)) map[string][][]*v1.Pod {
	sets := map[string][][]*v1.Pod{}
	for _, src := range benchSources {
		for r := range benchRounds {
			pods := make([]*v1.Pod, benchPodsPerSource)
			for i := range pods {
				pods[i] = benchPod(src, i)
				if change != nil && i%10 == r%10 {
					change(pods[i], r)
				}
			}
			sets[src] = append(sets[src], pods)
		}
	}
	return sets
}

// BenchmarkMerger measures Merge with 110 pods from each of 3 sources; one op
// is one SET of 110 pods from one source (the sources take turns).
func BenchmarkMerger(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	cases := []struct {
		name   string
		change func(p *v1.Pod, round int)
	}{
		{"unchanged", nil},
		{"status-churn", func(p *v1.Pod, r int) { p.Status.Message = fmt.Sprint("round ", r) }},
		{"label-churn", func(p *v1.Pod, r int) { p.Labels["round"] = fmt.Sprint(r) }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			sets := benchSets(tc.change)
			m := New(nil)
			for _, src := range benchSources { // the first SETs, from their own copies
				m.Merge(ctx, set(src, benchSets(nil)[src][0]...))
			}
			emitted := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				src := benchSources[i%len(benchSources)]
				for _, u := range m.Merge(ctx, set(src, sets[src][(i/len(benchSources))%benchRounds]...)) {
					emitted += len(u.Pods)
				}
			}
			reportMergeRates(b, emitted)
		})
	}

	b.Run("initial", func(b *testing.B) {
		// A new merger takes the first SET of each source: 330 ADDs per 3 ops.
		emitted := 0
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			sets := benchSets(nil)
			m := New(nil)
			b.StartTimer()
			for _, src := range benchSources {
				for _, u := range m.Merge(ctx, set(src, sets[src][0]...)) {
					emitted += len(u.Pods)
				}
			}
		}
		// Three SETs per iteration.
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(3*b.N), "ns/set")
		b.ReportMetric(float64(3*b.N)/b.Elapsed().Seconds(), "sets/s")
		b.ReportMetric(float64(emitted)/b.Elapsed().Seconds(), "emitted-pods/s")
	})
}

func reportMergeRates(b *testing.B, emitted int) {
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "sets/s")
	b.ReportMetric(float64(b.N*benchPodsPerSource)/secs, "pods/s")
	b.ReportMetric(float64(emitted)/float64(b.N), "emitted-pods/op")
}

const benchBurstPods = 1000

// burstPods returns benchBurstPods pods of one source; status, when not
// empty, goes into every pod's status message.
func burstPods(status string) []*v1.Pod {
	pods := make([]*v1.Pod, benchBurstPods)
	for i := range pods {
		pods[i] = benchPod(nodekit.SourceAPI, i)
		pods[i].Status.Message = status
	}
	return pods
}

// BenchmarkMergerBurst1000 measures the merger taking a burst of 1000 pod
// updates from the API source, whose every update is a SET of all its pods.
//
// add: a new merger gets one SET of 1000 new pods (1000 ADDs; an agent
// starting on a full node). status: a merger holding the 1000 pods gets a
// SET in which every pod's status changed (1000 RECONCILEs). watch: 1000
// pods are created one at a time, so the source sends 1000 SETs of 1, 2,
// ... 1000 pods (one ADD each); one op is the whole burst of 1000 SETs,
// 500,500 pods merged.
func BenchmarkMergerBurst1000(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	count := func(updates []nodekit.PodUpdate, op nodekit.Op) int {
		n := 0
		for _, u := range updates {
			if u.Op == op {
				n += len(u.Pods)
			}
		}
		return n
	}

	b.Run("add", func(b *testing.B) {
		pods := burstPods("")
		if n := count(New(nil).Merge(ctx, set(nodekit.SourceAPI, pods...)), nodekit.ADD); n != benchBurstPods {
			b.Fatalf("a SET of %d new pods gave %d ADDs", benchBurstPods, n)
		}
		b.ReportAllocs()
		for b.Loop() {
			// Merge takes the pods; re-annotating the same ones is harmless
			// and keeps the set-up out of the timed loop.
			New(nil).Merge(ctx, set(nodekit.SourceAPI, pods...))
		}
	})

	b.Run("status", func(b *testing.B) {
		rounds := [2][]*v1.Pod{burstPods("even"), burstPods("odd")}
		m := New(nil)
		m.Merge(ctx, set(nodekit.SourceAPI, burstPods("")...))
		if n := count(m.Merge(ctx, set(nodekit.SourceAPI, rounds[0]...)), nodekit.RECONCILE); n != benchBurstPods {
			b.Fatalf("a SET changing %d statuses gave %d RECONCILEs", benchBurstPods, n)
		}
		b.ReportAllocs()
		for i := 1; b.Loop(); i++ {
			m.Merge(ctx, set(nodekit.SourceAPI, rounds[i%2]...))
		}
	})

	b.Run("watch", func(b *testing.B) {
		// fresh[i] is pod i the first time it is listed; the later SETs list
		// it from relist[k%2], distinct objects with equal content, as the
		// source sends deep copies.
		fresh := burstPods("")
		relist := [2][]*v1.Pod{burstPods(""), burstPods("")}
		sets := make([][]*v1.Pod, benchBurstPods)
		for k := range sets {
			s := make([]*v1.Pod, k+1)
			copy(s, relist[k%2][:k])
			s[k] = fresh[k]
			sets[k] = s
		}
		burst := func() (adds, others int) {
			m := New(nil)
			for _, s := range sets {
				for _, u := range m.Merge(ctx, set(nodekit.SourceAPI, s...)) {
					if u.Op == nodekit.ADD {
						adds += len(u.Pods)
					} else {
						others += len(u.Pods)
					}
				}
			}
			return adds, others
		}
		if adds, others := burst(); adds != benchBurstPods || others != 0 {
			b.Fatalf("a burst of %d pods gave %d ADDs and %d other updates", benchBurstPods, adds, others)
		}
		b.ReportAllocs()
		for b.Loop() {
			burst()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBurstPods), "ns/set")
	})
}

// BenchmarkAPISourceBurst measures a burst of n pods created one at a time
// on the node: each arrives as a watch event at the API source's store (as
// the reflector calls it), and the update the source sends is merged. One op
// is the whole burst; ns/pod is the cost per pod, which stays flat as n grows
// when the pipeline does O(1) work per changed pod.
func BenchmarkAPISourceBurst(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			pods := make([]*v1.Pod, n)
			for i := range pods {
				pods[i] = benchPod(nodekit.SourceAPI, i)
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				// The reflector hands the store objects it decoded; give each
				// burst its own.
				burst := make([]*v1.Pod, n)
				for k := range burst {
					burst[k] = pods[k].DeepCopy()
				}
				out := make(chan nodekit.PodUpdate, 1)
				store := NewAPISource(nil, "node-1").newStore(ctx, out)
				m := New(nil)
				if err := store.Replace(nil, "1"); err != nil {
					b.Fatal(err)
				}
				m.Merge(ctx, <-out)
				b.StartTimer()
				for k, pod := range burst {
					if err := store.Add(pod); err != nil {
						b.Fatal(err)
					}
					u := <-out
					u.Source = nodekit.SourceAPI
					if got := m.Merge(ctx, u); len(got) != 1 || got[0].Op != nodekit.ADD || len(got[0].Pods) != 1 {
						b.Fatalf("pod %d of the burst gave %d updates, want one ADD of one pod", k, len(got))
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pod")
		})
	}
}

// BenchmarkMergerIncremental measures the merger alone on a burst of n pods
// as the API source sends them, one update per watch event: n ADDs of one
// pod, then n status changes (UPDATE ops the merger turns into RECONCILEs),
// then n REMOVEs, into a merger that already holds the 110 pods of a file
// source. One op is the whole burst; ns/pod (the op's time over n) stays
// flat as n grows when the merger's work per event is O(1).
func BenchmarkMergerIncremental(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			base := make([]*v1.Pod, n)
			for i := range base {
				base[i] = benchPod(nodekit.SourceAPI, i)
			}
			others := make([]*v1.Pod, benchPodsPerSource)
			for i := range others {
				others[i] = benchPod(nodekit.SourceFile, i)
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				// Merge takes the pods it is given: each burst gets its own.
				adds, changes := make([]*v1.Pod, n), make([]*v1.Pod, n)
				for i := range base {
					adds[i], changes[i] = base[i].DeepCopy(), base[i].DeepCopy()
					changes[i].ResourceVersion = "2"
					changes[i].Status.Message = "changed"
				}
				m := New(nil)
				m.Merge(ctx, set(nodekit.SourceFile, copyPods(others)...))
				m.Merge(ctx, set(nodekit.SourceAPI))
				b.StartTimer()
				for i := range n {
					mustOne(b, m.Merge(ctx, op(nodekit.ADD, nodekit.SourceAPI, adds[i])), nodekit.ADD)
				}
				for i := range n {
					mustOne(b, m.Merge(ctx, op(nodekit.UPDATE, nodekit.SourceAPI, changes[i])), nodekit.RECONCILE)
				}
				for i := range n {
					mustOne(b, m.Merge(ctx, op(nodekit.REMOVE, nodekit.SourceAPI, base[i])), nodekit.REMOVE)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pod")
		})
	}
}

// mustOne fails b unless updates is one update of one pod with op.
func mustOne(b *testing.B, updates []nodekit.PodUpdate, want nodekit.Op) {
	if len(updates) != 1 || updates[0].Op != want || len(updates[0].Pods) != 1 {
		b.Fatalf("got %d updates (first %v), want one %v of one pod", len(updates), updates, want)
	}
}

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

package criruntime

import (
	"context"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
)

// The hash is upstream kubelet v1.37's: the same value for the same name
// and image, whatever else the container says, so that neither agent reads
// the other's containers as changed.
func TestHashContainerIsKubelets(t *testing.T) {
	base := v1.Container{Name: "test_container", Image: "foo/image:v1"}
	for _, tc := range []struct {
		name string
		c    v1.Container
		want uint64
	}{
		// Upstream's own test vector (pkg/kubelet/container TestHashContainer).
		{"upstream vector", v1.Container{Name: "test_container", Image: "foo/image:v1",
			Args: []string{"/bin/sh", "-c", "echo abc"}, Ports: []v1.ContainerPort{{ContainerPort: 8001}}}, 0x8e45cbd0},
		{"name and image only", base, 0x8e45cbd0},
		{"command, env, probes and resources do not count", v1.Container{Name: "test_container", Image: "foo/image:v1",
			Command: []string{"sleep", "1"}, Env: []v1.EnvVar{{Name: "A", Value: "b"}},
			ReadinessProbe: &v1.Probe{PeriodSeconds: 3}, TerminationMessagePath: "/dev/x"}, 0x8e45cbd0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HashContainer(&tc.c); got != tc.want {
				t.Errorf("HashContainer = %#x, want %#x", got, tc.want)
			}
		})
	}
	otherImage, otherName := base, base
	otherImage.Image = "foo/image:v2"
	otherName.Name = "test_container2"
	if HashContainer(&otherImage) == HashContainer(&base) || HashContainer(&otherName) == HashContainer(&base) {
		t.Error("a new image or name gives the same hash")
	}
}

// The labels, annotations and metadata written on a container and its
// sandbox are exactly the keys and values kubelet v1.37 writes.
func TestCRIObjectsCarryKubeletLabels(t *testing.T) {
	r, rs, is := newFake(t)
	is.SetFakeImages([]string{"busybox:1.36"})
	grace, deletion := int64(30), int64(10)
	pod := testPod(v1.Container{
		Name: "app", Image: "busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent,
		TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
		Ports:     []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
		Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "sleep 1"}}}},
	})
	pod.Annotations = map[string]string{"team": "a"}
	pod.Spec.TerminationGracePeriodSeconds = &grace
	pod.DeletionGracePeriodSeconds = &deletion
	opts := func(_ context.Context, _ *v1.Pod, _ *v1.Container, _ []string) (*nodekit.ContainerOptions, error) {
		// A device plugin's annotation; the agent's own keys win over it.
		return &nodekit.ContainerOptions{Annotations: map[string]string{"vendor.example/dev": "0", annotationRestartCount: "99"}}, nil
	}
	res := r.SyncPod(t.Context(), nodekit.SyncPodRequest{
		Pod: pod, Actions: nodekit.PodActions{CreateSandbox: true, Attempt: 2, ContainersToStart: []int{0}}, Options: opts,
	})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	sb := rs.sandboxConfigs[res.SandboxID]
	wantSandboxLabels := map[string]string{"app": "web",
		"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "uid-1"}
	if !maps.Equal(sb.Labels, wantSandboxLabels) {
		t.Errorf("sandbox labels = %v, want %v", sb.Labels, wantSandboxLabels)
	}
	if !maps.Equal(sb.Annotations, pod.Annotations) {
		t.Errorf("sandbox annotations = %v, want the pod's %v", sb.Annotations, pod.Annotations)
	}
	if m := sb.Metadata; m.Name != "web" || m.Namespace != "default" || m.Uid != "uid-1" || m.Attempt != 2 {
		t.Errorf("sandbox metadata = %+v", m)
	}
	if len(rs.containerConfigs) != 1 {
		t.Fatalf("%d containers created, want 1", len(rs.containerConfigs))
	}
	for _, c := range rs.containerConfigs {
		wantLabels := map[string]string{"io.kubernetes.container.name": "app",
			"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "uid-1"}
		if !maps.Equal(c.Labels, wantLabels) {
			t.Errorf("container labels = %v, want %v", c.Labels, wantLabels)
		}
		wantAnnotations := map[string]string{
			"vendor.example/dev":                               "0",
			"io.kubernetes.container.hash":                     "395745",
			"io.kubernetes.container.restartCount":             "0",
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "FallbackToLogsOnError",
			"io.kubernetes.pod.terminationGracePeriod":         "30",
			"io.kubernetes.pod.deletionGracePeriod":            "10",
			"io.kubernetes.container.preStopHandler":           `{"exec":{"command":["sh","-c","sleep 1"]}}`,
			"io.kubernetes.container.ports":                    `[{"name":"http","containerPort":8080,"protocol":"TCP"}]`,
		}
		if !maps.Equal(c.Annotations, wantAnnotations) {
			t.Errorf("container annotations = %v,\nwant %v", c.Annotations, wantAnnotations)
		}
		if c.Metadata.Name != "app" || c.Metadata.Attempt != 0 || c.LogPath != "app/0.log" {
			t.Errorf("container metadata %+v, log path %q", c.Metadata, c.LogPath)
		}
	}
}

// A container kubelet made (its labels and annotations, written here by
// hand as kubelet v1.37 writes them) reads back with the same hash as the
// pod spec's container and kubelet's restart count.
func TestKubeletContainerReadsBack(t *testing.T) {
	r, rs, _ := newFake(t)
	ctx := t.Context()
	pod := testPod(v1.Container{Name: "app", Image: "busybox:1.36"})
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1", Attempt: 0},
		Labels:   podLabels(pod),
	}
	sbID, err := rs.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := rs.CreateContainer(ctx, sbID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 3},
		Image:    &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "busybox:1.36"},
		Labels: map[string]string{"io.kubernetes.container.name": "app",
			"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": "uid-1"},
		Annotations: map[string]string{
			"io.kubernetes.container.hash": "395745", "io.kubernetes.container.restartCount": "3",
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log", "io.kubernetes.container.terminationMessagePolicy": "File",
			"io.kubernetes.pod.terminationGracePeriod": "30",
		},
	}, sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err := r.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	cs := st.FindContainer("app")
	if cs == nil {
		t.Fatalf("kubelet's container not found: %+v", st)
	}
	if cs.Hash != HashContainer(&pod.Spec.Containers[0]) {
		t.Errorf("hash read %#x, the spec hashes to %#x", cs.Hash, HashContainer(&pod.Spec.Containers[0]))
	}
	if cs.RestartCount != 3 || cs.State != nodekit.StateRunning {
		t.Errorf("restart count %d, state %s; want 3, running", cs.RestartCount, cs.State)
	}
	if len(st.Sandboxes) != 1 || st.Sandboxes[0].Attempt != 0 {
		t.Errorf("sandboxes = %+v", st.Sandboxes)
	}
}

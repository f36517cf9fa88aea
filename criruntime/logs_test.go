package criruntime

import (
	"context"
	"maps"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
)

// logPathRuntime is the fake CRI runtime with a log path in every
// container status, counting the status calls.
type logPathRuntime struct {
	*critest.FakeRuntimeService
	statuses int
}

func (l *logPathRuntime) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	l.statuses++
	st, err := l.FakeRuntimeService.ContainerStatus(ctx, id, verbose)
	if err == nil {
		st.Status.LogPath = "/logs/" + id + ".log"
	}
	return st, err
}

// A running container's status is asked for once: later calls reuse the
// path, and a container that stopped is left out and forgotten.
func TestRunningContainerLogsAsksEachContainerOnce(t *testing.T) {
	ctx := t.Context()
	rs := &logPathRuntime{FakeRuntimeService: critest.NewFakeRuntimeService()}
	r, err := NewFromServices(ctx, rs, critest.NewFakeImageService(), Config{Endpoint: "fake", PodLogsDir: t.TempDir(), RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sbc := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1"}}
	sb, err := rs.RunPodSandbox(ctx, sbc, "")
	if err != nil {
		t.Fatal(err)
	}
	start := func(name string) string {
		t.Helper()
		id, err := rs.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image: &runtimeapi.ImageSpec{Image: "busybox"}}, sbc)
		if err == nil {
			err = rs.StartContainer(ctx, id)
		}
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	logs := func(want ...string) {
		t.Helper()
		got, err := r.RunningContainerLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exp := map[string]string{}
		for _, id := range want {
			exp[id] = "/logs/" + id + ".log"
		}
		if !maps.Equal(got, exp) {
			t.Fatalf("logs = %v, want %v", got, exp)
		}
		got["changed"] = "by the caller" // the caller's own map
	}

	a, b := start("a"), start("b")
	logs(a, b)
	if rs.statuses != 2 {
		t.Fatalf("first call: %d status calls, want 2", rs.statuses)
	}
	logs(a, b)
	if rs.statuses != 2 {
		t.Fatalf("second call asked the runtime again: %d status calls", rs.statuses)
	}
	if err := rs.StopContainer(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	c := start("c")
	logs(b, c)
	if rs.statuses != 3 {
		t.Fatalf("after a new container: %d status calls, want 3", rs.statuses)
	}
	// a is forgotten: were it running again under its ID, it would be asked for.
	if _, ok := r.logPaths[a]; ok {
		t.Error("the stopped container's path is still kept")
	}
}

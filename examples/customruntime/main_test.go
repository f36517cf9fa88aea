package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// recordingSink keeps the newest status of each pod by name.
type recordingSink struct {
	mu   sync.Mutex
	last map[string]v1.PodStatus
}

func (s *recordingSink) SetPodStatus(_ context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[pod.Name] = *st.DeepCopy()
	return nil
}

func (s *recordingSink) DeletePod(context.Context, *v1.Pod) error { return nil }

func (s *recordingSink) get(name string) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.last[name]
	return st, ok
}

// A process whose liveness probe starts failing is killed and started
// again by nodekit's sync loop: its restart count goes up.
const livenessPod = `apiVersion: v1
kind: Pod
metadata:
  name: liveness
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "echo started; touch healthy; sleep 2; rm -f healthy; exec sleep 600"]
    livenessProbe:
      exec:
        command: ["test", "-f", "healthy"]
      periodSeconds: 1
      failureThreshold: 1
`

func TestLivenessProbeRestartsProcess(t *testing.T) {
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests, "liveness.yaml"), []byte(livenessPod), 0o644); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{last: map[string]v1.PodStatus{}}
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))))
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{manifests: manifests, rootDir: filepath.Join(dir, "root"), nodeName: "test-node", sink: sink})
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("run: %v", err)
		}
	}()

	name := "liveness-test-node" // static pods get the node name as suffix
	var last v1.PodStatus
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if st, ok := sink.get(name); ok && len(st.ContainerStatuses) == 1 {
			last = st
			cs := st.ContainerStatuses[0]
			if cs.RestartCount >= 1 && cs.State.Running != nil {
				if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 128+15 {
					t.Errorf("last termination %+v, want the SIGTERM of the liveness kill", cs.LastTerminationState)
				}
				if st.Phase != v1.PodRunning {
					t.Errorf("phase %s, want Running", st.Phase)
				}
				// Both instances wrote to the container's log.
				logs, _ := filepath.Glob(filepath.Join(dir, "root", "procs", "*", "app.log"))
				if len(logs) != 1 {
					t.Fatalf("want one app.log, have %v", logs)
				}
				if b, _ := os.ReadFile(logs[0]); strings.Count(string(b), "started") < 2 {
					t.Errorf("log %q, want two starts", b)
				}
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the process was not restarted within 60s; last status: %+v", last)
}

func TestRunNeedsManifests(t *testing.T) {
	if err := run(t.Context(), config{}); err == nil || !strings.Contains(err.Error(), "-manifests") {
		t.Fatalf("run without -manifests: %v", err)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestContainerLogRotation: with containerLogMaxSize 64Ki and
// containerLogMaxFiles 3, a chatty container's log is rotated (older
// files compressed, never more than 3 files) and kubectl logs --tail keeps
// returning its newest lines.
func TestContainerLogRotation(t *testing.T) {
	e := startEnv(t, envOption{config: "containerLogMaxSize: 64Ki\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n"})
	e.createPod(t, simplePod("chatty", v1.RestartPolicyAlways,
		`i=0; while true; do j=0; while [ $j -lt 100 ]; do echo "line-$i"; i=$((i+1)); j=$((j+1)); done; sleep 0.1; done`))
	p := e.waitPod(t, "chatty", 60*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	dir := filepath.Join(e.podLogs, "default_chatty_"+string(p.UID), "app")

	var files []string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 90*time.Second, true, func(context.Context) (bool, error) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return false, nil
		}
		files = files[:0]
		gz := 0
		for _, en := range entries {
			files = append(files, en.Name())
			if strings.HasSuffix(en.Name(), ".gz") {
				gz++
			}
		}
		if len(files) > 3 {
			t.Fatalf("more than containerLogMaxFiles files: %v", files)
		}
		return len(files) == 3 && gz >= 1, nil
	})
	if err != nil {
		t.Fatalf("no rotation with a compressed file in %s: %v", dir, files)
	}

	// Right after a rotation the live file is empty until the container's
	// next write (kubelet reads only the live file too), so an empty answer
	// is retried for a moment; anything else that is not a line fails.
	last := func() int {
		var b []byte
		for try := 0; try < 20; try++ {
			var err error
			b, err = e.client.CoreV1().Pods("default").GetLogs("chatty", &v1.PodLogOptions{Container: "app", TailLines: ptrTo(int64(1))}).DoRaw(t.Context())
			if err != nil {
				t.Fatalf("logs --tail=1: %v", err)
			}
			if len(strings.TrimSpace(string(b))) > 0 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(string(b)), "line-"))
		if err != nil {
			t.Fatalf("logs --tail=1 = %q", b)
		}
		return n
	}
	first := last()
	time.Sleep(4 * time.Second) // past another rotation interval
	if second := last(); second <= first {
		t.Fatalf("the newest line did not advance across rotations: %d then %d", first, second)
	}
}

func ptrTo[T any](v T) *T { return &v }

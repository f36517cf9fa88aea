package shutdown

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// Shutdown records its start (end zero) before stopping pods and both
// times after, in the state file upstream's kubelet writes, and Run hands
// the stored state to Times when it starts.
func TestShutdownState(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	path := filepath.Join(t.TempDir(), StateFileName)
	var seen []State
	pods := []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}}}
	killer := PodKillerFunc(func(context.Context, *v1.Pod, int64, func(*v1.PodStatus)) error {
		if s, err := LoadState(path); err != nil || !s.StartTime.Equal(time.Unix(1000, 0)) || !s.EndTime.IsZero() {
			t.Errorf("state while stopping pods = %+v, %v; want start 1000, no end", s, err)
		}
		clk.Step(7 * time.Second)
		return nil
	})
	m, err := New(Config{Groups: []Group{{0, 30}}, ActivePods: func() []*v1.Pod { return pods }, Killer: killer,
		Clock: clk, StateFile: path, Times: func(s State) { seen = append(seen, s) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	want := State{StartTime: time.Unix(1000, 0), EndTime: time.Unix(1007, 0)}
	if !s.StartTime.Equal(want.StartTime) || !s.EndTime.Equal(want.EndTime) {
		t.Errorf("stored %+v, want %+v", s, want)
	}
	if len(seen) != 2 || !seen[0].EndTime.IsZero() || !seen[1].EndTime.Equal(want.EndTime) {
		t.Errorf("Times got %+v, want the start then both", seen)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}

	// A new manager reports the stored state once Run starts.
	seen = nil
	m2, err := New(Config{Groups: []Group{{0, 30}}, ActivePods: func() []*v1.Pod { return nil }, Killer: killer,
		Clock: clk, StateFile: path, Times: func(s State) { seen = append(seen, s) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_ = m2.Run(ctx, blockedTrigger{})
	if len(seen) != 1 || !seen[0].EndTime.Equal(want.EndTime) {
		t.Errorf("Run reported %+v, want the stored state", seen)
	}
}

type blockedTrigger struct{}

func (blockedTrigger) Watch(ctx context.Context) (<-chan bool, error) { return make(chan bool), nil }

package statusmgr

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// gateSink holds every write until release is closed and records how many
// were under way at once.
type gateSink struct {
	recordingSink
	release        chan struct{}
	started        chan struct{}
	gmu            sync.Mutex
	inFlight, most int
}

func (s *gateSink) SetPodStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) error {
	s.gmu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.gmu.Unlock()
	s.started <- struct{}{}
	<-s.release
	s.gmu.Lock()
	s.inFlight--
	s.gmu.Unlock()
	return s.recordingSink.SetPodStatus(ctx, pod, st)
}

// TestParallelPublishesToThatManyPodsAtOnce: with Parallel 3, a sync of
// ten pods has three writes under way at once and never a fourth; every
// pod's status is written once. Without it, one at a time.
func TestParallelPublishesToThatManyPodsAtOnce(t *testing.T) {
	for _, tc := range []struct{ parallel, want int }{{0, 1}, {1, 1}, {3, 3}} {
		t.Run(fmt.Sprint("parallel=", tc.parallel), func(t *testing.T) {
			sink := &gateSink{release: make(chan struct{}), started: make(chan struct{}, 10)}
			m, _, _ := newTestManager(t, Config{Sink: sink, Parallel: tc.parallel})
			for i := range 10 {
				mustSet(t, m, testPod(fmt.Sprint("p", i), "c"), runningStatus(running("c", true)))
			}
			done := make(chan error, 1)
			go func() { done <- m.SyncOnce(t.Context()) }()
			for range tc.want {
				<-sink.started
			}
			time.Sleep(50 * time.Millisecond) // room for a write beyond the limit to start
			select {
			case <-sink.started:
				t.Fatalf("a write started beyond the %d allowed at once", tc.want)
			case err := <-done:
				t.Fatalf("sync ended with writes held: %v", err)
			default:
			}
			close(sink.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if sink.most != tc.want {
				t.Errorf("at most %d writes at once, want %d", sink.most, tc.want)
			}
			seen := map[string]int{}
			for _, s := range sink.takeSets() {
				seen[s.name]++
			}
			if len(seen) != 10 {
				t.Fatalf("statuses written for %d pods, want 10: %v", len(seen), seen)
			}
			for name, n := range seen {
				if n != 1 {
					t.Errorf("%s written %d times", name, n)
				}
			}
			if err := m.SyncOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
			if sets := sink.takeSets(); len(sets) != 0 {
				t.Errorf("a second sync wrote %d statuses again; the first one's were recorded as sent", len(sets))
			}
		})
	}
	if _, err := NewManager(Config{Sink: &recordingSink{}, Parallel: -1}); err == nil {
		t.Error("NewManager accepted Parallel -1")
	}
}

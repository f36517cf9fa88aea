package shutdown

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// failAfter bounds a wait on a real event; it is a failure deadline, not
// a way to wait for a result.
const failAfter = 10 * time.Second

func TestSignalTrigger(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := SignalTrigger(syscall.SIGUSR2).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	select {
	case begins := <-events:
		if !begins {
			t.Error("signal reported a cancellation")
		}
	case <-time.After(failAfter):
		t.Fatal("SIGUSR2 did not fire the trigger")
	}
	cancel()
	select {
	case _, ok := <-events:
		if ok {
			t.Error("event after ctx was done")
		}
	case <-time.After(failAfter):
		t.Fatal("the trigger's channel was not closed once ctx was done")
	}
	if _, err := SignalTrigger(nil).Watch(t.Context()); err == nil {
		t.Error("SignalTrigger(nil).Watch = nil error")
	}
}

// watched tells when the wrapped trigger is watching, so the signal is
// sent only once it is caught (an uncaught SIGUSR2 ends the process).
type watched struct {
	Trigger
	ready chan struct{}
}

func (w watched) Watch(ctx context.Context) (<-chan bool, error) {
	ch, err := w.Trigger.Watch(ctx)
	close(w.ready)
	return ch, err
}

// A real signal through Run stops the pods.
func TestRunWithSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pods := testPods()
	killed := make(chan string, len(pods))
	k := PodKillerFunc(func(_ context.Context, pod *v1.Pod, _ int64, _ func(*v1.PodStatus)) error {
		killed <- pod.Name
		return nil
	})
	m, err := New(Config{Groups: []Group{{0, 20}, {SystemCriticalPriority, 10}},
		ActivePods: func() []*v1.Pod { return pods }, Killer: k, Clock: clock.RealClock{}})
	if err != nil {
		t.Fatal(err)
	}
	tr := watched{Trigger: SignalTrigger(syscall.SIGUSR2), ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, tr) }()
	<-tr.ready
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(failAfter)
	var got []string
	for len(got) < len(pods) {
		select {
		case name := <-killed:
			got = append(got, name)
		case <-deadline:
			t.Fatalf("after SIGUSR2: killed %v", got)
		}
	}
	if got[len(got)-1] != "dns" {
		t.Errorf("kill order %v: the critical pod dns is not last", got)
	}
	if !m.ShuttingDown() {
		t.Error("not shutting down after SIGUSR2")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
}

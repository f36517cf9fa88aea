package podconfig

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

// waitTimeout guards every wait for a result; tests never sleep to wait.
const waitTimeout = 30 * time.Second

// recv returns the next value of ch, failing the test after waitTimeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		var zero T
		return zero
	}
}

// scripted is a source that sends its updates, then waits for ctx.
func scripted(name string, updates ...nodekit.PodUpdate) nodekit.Source {
	return nodekit.SourceFunc{SourceName: name, Func: func(ctx context.Context, out chan<- nodekit.PodUpdate) error {
		for _, u := range updates {
			u.Source = "ignored: the merger stamps the name"
			select {
			case out <- u:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	m := New([]nodekit.Source{
		scripted("api", set("", testPod("1", "a")), set("", testPod("1", "a", withLabel("x", "y")))),
		scripted("file", set("")),
	}, WithClock(clocktesting.NewFakePassiveClock(testStart)))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	var api, file []string
	for len(api) < 2 || len(file) < 1 {
		u := recv(t, m.Updates(), "merged updates")
		for _, s := range summary([]nodekit.PodUpdate{u}) {
			if u.Source == "api" {
				api = append(api, s)
			} else {
				file = append(file, s)
			}
		}
	}
	if want := []string{"ADD api: 1", "UPDATE api: 1"}; !slices.Equal(api, want) {
		t.Errorf("api updates %q, want %q", api, want)
	}
	if want := []string{"ADD file: "}; !slices.Equal(file, want) {
		t.Errorf("file updates %q, want %q", file, want)
	}
	if !m.SeenAllSources() {
		t.Error("not SeenAllSources after a SET from each")
	}
	cancel()
	if err := recv(t, done, "Run to return"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if _, open := <-m.Updates(); open {
		t.Error("Updates still open after Run returned")
	}
	if err := m.Run(ctx); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("second Run = %v, want an error", err)
	}
}

func TestRunStopsOnSourceError(t *testing.T) {
	boom := errors.New("boom")
	stopped := make(chan struct{})
	m := New([]nodekit.Source{
		nodekit.SourceFunc{SourceName: "bad", Func: func(context.Context, chan<- nodekit.PodUpdate) error { return boom }},
		nodekit.SourceFunc{SourceName: "good", Func: func(ctx context.Context, _ chan<- nodekit.PodUpdate) error {
			<-ctx.Done()
			close(stopped)
			return ctx.Err()
		}},
	})
	err := m.Run(testContext(t))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("Run = %v, want the bad source's error", err)
	}
	recv(t, stopped, "the good source to stop")
}

func TestRunRejectsDuplicateNames(t *testing.T) {
	for name, sources := range map[string][]nodekit.Source{
		"duplicate": namedSources("file", "file"),
		"empty":     namedSources(""),
	} {
		if err := New(sources).Run(testContext(t)); err == nil {
			t.Errorf("%s names: Run = nil, want an error", name)
		}
	}
}

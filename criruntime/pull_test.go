package criruntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit"
)

// slowImages is a fake image service whose pulls take time (virtual time:
// the tests run in a synctest bubble) and which records when each pull ran.
type slowImages struct {
	*critest.FakeImageService
	delay map[string]time.Duration // by image; 1s when absent
	hang  bool                     // pulls wait for their context to end

	mu       sync.Mutex
	inflight int
	peak     int
	order    []string
	spans    map[string][2]time.Time
}

func (s *slowImages) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	s.mu.Lock()
	s.inflight++
	s.peak = max(s.peak, s.inflight)
	s.order = append(s.order, spec.Image)
	start := time.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.spans[spec.Image] = [2]time.Time{start, time.Now()}
		s.mu.Unlock()
	}()
	if s.hang {
		<-ctx.Done()
		// What a gRPC client returns when the call's context expires.
		return "", status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	}
	d, ok := s.delay[spec.Image]
	if !ok {
		d = time.Second
	}
	time.Sleep(d)
	return s.FakeImageService.PullImage(ctx, spec, auth, sb)
}

type eventLog struct {
	mu  sync.Mutex
	all []string
}

func (e *eventLog) Eventf(_ runtime.Object, typ, reason, format string, args ...interface{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, typ+" "+reason+" "+fmt.Sprintf(format, args...))
}

func (e *eventLog) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.all...)
}

func newPullFake(t *testing.T, cfg Config) (*Runtime, *slowImages, *eventLog) {
	t.Helper()
	is := &slowImages{FakeImageService: critest.NewFakeImageService(), delay: map[string]time.Duration{}, spans: map[string][2]time.Time{}}
	is.SetFakeImageSize(1234)
	ev := &eventLog{}
	cfg.Endpoint, cfg.PodLogsDir, cfg.Events = "fake", t.TempDir(), ev
	r, err := NewFromServices(t.Context(), critest.NewFakeRuntimeService(), is, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, is, ev
}

// ensure runs ensureImage for a pod with one container of image, always
// pulling.
func ensure(ctx context.Context, r *Runtime, image string) error {
	pod := testPod(v1.Container{Name: "c", Image: image, ImagePullPolicy: v1.PullAlways})
	_, err := r.ensureImage(ctx, pod, &pod.Spec.Containers[0], nil, nil)
	return err
}

// pullAll starts one ensure per image, each once the previous one is
// blocked (so the arrival order is the slice order), and waits for all.
func pullAll(t *testing.T, r *Runtime, images ...string) []error {
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	for i, img := range images {
		wg.Go(func() { errs[i] = ensure(t.Context(), r, img) })
		synctest.Wait()
	}
	wg.Wait()
	return errs
}

func TestPullConcurrency(t *testing.T) {
	cases := []struct {
		name     string
		cfg      Config
		wantPeak int
	}{
		{name: "serialized by default", wantPeak: 1},
		{name: "serialized", cfg: Config{SerializeImagePulls: ptr.To(true)}, wantPeak: 1},
		{name: "serialized, max 1", cfg: Config{SerializeImagePulls: ptr.To(true), MaxParallelImagePulls: 1}, wantPeak: 1},
		{name: "parallel, unlimited", cfg: Config{SerializeImagePulls: ptr.To(false)}, wantPeak: 3},
		{name: "parallel, max 1", cfg: Config{SerializeImagePulls: ptr.To(false), MaxParallelImagePulls: 1}, wantPeak: 1},
		{name: "parallel, max 2", cfg: Config{SerializeImagePulls: ptr.To(false), MaxParallelImagePulls: 2}, wantPeak: 2},
		{name: "unset with max 2 means parallel, as upstream", cfg: Config{MaxParallelImagePulls: 2}, wantPeak: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, is, _ := newPullFake(t, tc.cfg)
				for _, err := range pullAll(t, r, "a:1", "b:1", "c:1") {
					if err != nil {
						t.Fatal(err)
					}
				}
				if is.peak != tc.wantPeak {
					t.Errorf("at most %d pulls ran at once, want %d", is.peak, tc.wantPeak)
				}
				a, b := is.spans["a:1"], is.spans["b:1"]
				overlap := b[0].Before(a[1]) && a[0].Before(b[1])
				if overlap != (tc.wantPeak > 1) {
					t.Errorf("pulls of a (%v-%v) and b (%v-%v) overlap = %v", a[0], a[1], b[0], b[1], overlap)
				}
				if tc.wantPeak == 1 && strings.Join(is.order, ",") != "a:1,b:1,c:1" {
					t.Errorf("pull order %v, want the order asked", is.order)
				}
			})
		})
	}
}

func TestPullEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, is, ev := newPullFake(t, Config{})
		is.delay["b:1"] = 2500 * time.Millisecond
		pullAll(t, r, "a:1", "b:1")
		want := []string{
			`Normal Pulling Pulling image "a:1"`,
			`Normal Pulling Pulling image "b:1"`,
			`Normal Pulled Successfully pulled image "a:1" in 1s (1s including waiting). Image size: 1234 bytes.`,
			`Normal Pulled Successfully pulled image "b:1" in 2.5s (3.5s including waiting). Image size: 1234 bytes.`,
		}
		if got := ev.list(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

func TestPullQPS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, is, ev := newPullFake(t, Config{PullQPS: 0.5, PullBurst: 2})
		is.delay["a:1"], is.delay["b:1"], is.delay["c:1"], is.delay["d:1"] = 0, 0, 0, 0
		for _, img := range []string{"a:1", "b:1"} {
			if err := ensure(t.Context(), r, img); err != nil {
				t.Fatalf("pull %s within the burst: %v", img, err)
			}
		}
		err := ensure(t.Context(), r, "c:1")
		if !errors.Is(err, ErrPullQPSExceeded) || !errors.Is(err, nodekit.ErrImagePull) {
			t.Fatalf("third pull: %v, want ErrPullQPSExceeded and ErrImagePull", err)
		}
		var ae *nodekit.ActionError
		if !errors.As(err, &ae) || ae.Message != "pull QPS exceeded" {
			t.Errorf("error %q: message is not upstream's (the pull's error alone)", err)
		}
		if got := ev.list(); got[len(got)-2] != `Warning Failed Failed to pull image "c:1": pull QPS exceeded` || got[len(got)-1] != `Warning Failed Error: ErrImagePull` {
			t.Errorf("last events %q", got[len(got)-2:])
		}
		time.Sleep(2 * time.Second) // one token at 0.5 QPS
		if err := ensure(t.Context(), r, "d:1"); err != nil {
			t.Fatalf("pull after the refill: %v", err)
		}
		if err := ensure(t.Context(), r, "c:1"); !errors.Is(err, ErrPullQPSExceeded) {
			t.Fatalf("pull right after: %v, want ErrPullQPSExceeded", err)
		}
	})
}

func TestPullDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, is, ev := newPullFake(t, Config{PullDeadline: 30 * time.Second})
		is.hang = true
		start := time.Now()
		err := ensure(t.Context(), r, "slow:1")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nodekit.ErrImagePull) {
			t.Fatalf("error %v, want DeadlineExceeded and ErrImagePull", err)
		}
		if took := time.Since(start); took != 30*time.Second {
			t.Errorf("pull gave up after %v, want 30s", took)
		}
		want := `Warning Failed Failed to pull image "slow:1": image pull of "slow:1" exceeded deadline 30s`
		if got := ev.list(); got[len(got)-2] != want || got[len(got)-1] != `Warning Failed Error: ErrImagePull` {
			t.Errorf("last events %q, want %q then the reason", got[len(got)-2:], want)
		}
	})
}

// The deadline counts from the start of the pull, not from the request: a
// pull that waited its turn still gets the whole deadline.
func TestPullDeadlineExcludesWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, is, _ := newPullFake(t, Config{PullDeadline: 30 * time.Second})
		is.delay["a:1"], is.delay["b:1"] = 20*time.Second, 20*time.Second
		for _, err := range pullAll(t, r, "a:1", "b:1") {
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A pull waiting for its turn gives up when its context ends.
func TestPullWaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, is, _ := newPullFake(t, Config{})
		is.delay["a:1"] = time.Minute
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { _ = ensure(t.Context(), r, "a:1") })
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := ensure(ctx, r, "b:1"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a turn to pull") {
			t.Fatalf("error %v", err)
		}
		if len(is.order) != 1 {
			t.Errorf("pulls started: %v", is.order)
		}
	})
}

func TestPullConfigValidation(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{SerializeImagePulls: ptr.To(true), MaxParallelImagePulls: 2}, "Config.MaxParallelImagePulls is 2, but Config.SerializeImagePulls is true"},
		{Config{SerializeImagePulls: ptr.To(false), MaxParallelImagePulls: -1}, "Config.MaxParallelImagePulls is -1"},
		{Config{PullQPS: -1}, "Config.PullQPS"},
		{Config{PullBurst: -1}, "Config.PullBurst"},
		{Config{PullDeadline: -time.Second}, "Config.PullDeadline"},
	}
	for _, tc := range cases {
		_, err := NewFromServices(t.Context(), critest.NewFakeRuntimeService(), critest.NewFakeImageService(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
		if _, err := New(t.Context(), Config{Endpoint: "unix:///nonexistent.sock", PullQPS: tc.cfg.PullQPS, PullBurst: tc.cfg.PullBurst,
			PullDeadline: tc.cfg.PullDeadline, SerializeImagePulls: tc.cfg.SerializeImagePulls, MaxParallelImagePulls: tc.cfg.MaxParallelImagePulls}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New %+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

package bootstrap_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/bootstrap"
)

// failCreates makes the fake API server fail every certificate request
// with what *refusal holds.
func failCreates(api *fakeAPI, refusal *atomic.Pointer[error]) {
	api.cs.PrependReactor("create", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, *refusal.Load()
	})
}

func refuse(refusal *atomic.Pointer[error], err error) { refusal.Store(&err) }

// stepUntilStopped steps clk a second at a time, each time once both of
// Run's loops (renewal and validity check) wait on it, until done
// delivers Run's result or limit has passed on clk. It returns how long
// had passed on clk, whether Run stopped, and its result.
func stepUntilStopped(t *testing.T, clk *clocktesting.FakeClock, done <-chan error, limit time.Duration) (time.Duration, bool, error) {
	t.Helper()
	start := clk.Now()
	var result error
	stopped := false
	for !stopped && clk.Now().Sub(start) < limit {
		until(t, "Run's loops wait on its clock, or Run stopped", func() bool {
			select {
			case result = <-done:
				stopped = true
			default:
			}
			return stopped || clk.Waiters() >= 2
		})
		if !stopped {
			clk.Step(time.Second)
		}
	}
	return clk.Now().Sub(start), stopped, result
}

// runExpired starts Run, until the test ends, on a Rotator with the
// default validity check whose certificate expired an hour ago and whose
// requests fail with what *refusal holds (first err); it returns the
// Rotator's clock and the channel Run's result comes on.
func runExpired(t *testing.T, refusal *atomic.Pointer[error], err error) (*clocktesting.FakeClock, <-chan error) {
	t.Helper()
	ca := newTestCA(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api := newFakeAPI(t, issueAt(t, ca, clk, -time.Minute, time.Hour))
	rot, _ := clockedSetupExiting(t, clk, api, 2*time.Hour, 0)
	refuse(refusal, err)
	failCreates(api, refusal)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- rot.Run(ctx) }()
	return clk, done
}

// With no valid certificate and the API server failing to answer, Run
// goes on; once the server refuses the bootstrap credentials' request, it
// stops with ErrNoValidCertificate, as kubelet exits.
func TestRotatorStopsWithoutAValidCertificate(t *testing.T) {
	var refusal atomic.Pointer[error]
	clk, done := runExpired(t, &refusal, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"))
	if after, stopped, err := stepUntilStopped(t, clk, done, 10*time.Minute); stopped {
		t.Fatalf("Run stopped after %v with the API server unreachable: %v", after, err)
	}
	refuse(&refusal, apierrors.NewForbidden(schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}, "", errors.New("token expired")))
	after, stopped, err := stepUntilStopped(t, clk, done, 2*time.Minute)
	if !stopped {
		t.Fatal("Run still running two minutes after the API server refused a request, with no valid certificate for twelve")
	}
	if !errors.Is(err, bootstrap.ErrNoValidCertificate) {
		t.Errorf("Run = %v, want ErrNoValidCertificate", err)
	}
	// The refusal comes at the next retry (32 s at most), the stop at the
	// next check after it (10 s).
	if after > 45*time.Second {
		t.Errorf("Run stopped %v after the server became responsive, want within 45 s", after)
	}
}

// The five minutes count from the start of Run (or the last time a
// certificate was valid): with the server refusing at once, Run stops
// at the first check after 5 minutes.
func TestRotatorStopsAfterFiveMinutes(t *testing.T) {
	var refusal atomic.Pointer[error]
	clk, done := runExpired(t, &refusal, apierrors.NewUnauthorized("bootstrap token expired"))
	after, stopped, err := stepUntilStopped(t, clk, done, 10*time.Minute)
	if !stopped || !errors.Is(err, bootstrap.ErrNoValidCertificate) {
		t.Fatalf("Run = %v (stopped %v after %v), want ErrNoValidCertificate", err, stopped, after)
	}
	if after <= 5*time.Minute || after > 5*time.Minute+10*time.Second {
		t.Errorf("Run stopped %v in, want at the first check (every 10 s) after 5 minutes", after)
	}
}

// Run returns only once the validity check it started has ended: no timer
// of either is left on its clock.
func TestRotatorRunLeavesNoValidityCheckBehind(t *testing.T) {
	ca := newTestCA(t)
	clk := clocktesting.NewFakeClock(time.Now())
	api := newFakeAPI(t, issueAt(t, ca, clk, -time.Minute, time.Hour))
	rot, _ := clockedSetupExiting(t, clk, api, 0, 5*time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- rot.Run(ctx) }()
	until(t, "Run waits for the deadline and the next validity check", clk.HasWaiters)
	time.Sleep(50 * time.Millisecond) // both goroutines reach their timers
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after its context ended", err)
	}
	if clk.HasWaiters() {
		t.Error("a timer is still set on the clock after Run returned: the validity check outlived Run")
	}
}

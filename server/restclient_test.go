package server

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRESTClientHookFollowsAttach(t *testing.T) {
	var h RESTClientHook
	opts := h.Opts()
	ctx := context.Background()
	u := url.URL{Scheme: "https", Host: "127.0.0.1:6443", Path: "/api/v1/pods"}

	// Nothing attached: observations are dropped, not a panic.
	opts.RequestResult.Increment(ctx, "200", "GET", u.Host)
	opts.RequestLatency.Observe(ctx, "GET", u, time.Second)

	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, err := RegisterRESTClientMetrics(regA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RegisterRESTClientMetrics(regB)
	if err != nil {
		t.Fatal(err)
	}
	h.Attach(a)
	opts.RequestResult.Increment(ctx, "201", "POST", u.Host)
	opts.RequestLatency.Observe(ctx, "POST", u, 30*time.Millisecond)
	opts.RequestRetry.IncrementRetry(ctx, "500", "POST", u.Host)
	opts.ResponseSize.Observe(ctx, "POST", u.Host, 300)
	h.Attach(b)
	opts.RequestResult.Increment(ctx, "201", "POST", u.Host)
	opts.RequestResult.Increment(ctx, "404", "GET", u.Host)

	if got := testutil.ToFloat64(a.results.WithLabelValues("201", "POST", u.Host)); got != 1 {
		t.Errorf("first registry rest_client_requests_total{201,POST} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(b.results.WithLabelValues("201", "POST", u.Host)); got != 1 {
		t.Errorf("second registry rest_client_requests_total{201,POST} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(a.retries.WithLabelValues("500", "POST", u.Host)); got != 1 {
		t.Errorf("rest_client_request_retries_total = %v, want 1", got)
	}
	if n := testutil.CollectAndCount(a.latency, "rest_client_request_duration_seconds"); n != 1 {
		t.Errorf("rest_client_request_duration_seconds series = %d, want 1 (POST)", n)
	}
	if n, err := testutil.GatherAndCount(regB, "rest_client_requests_total"); err != nil || n != 2 {
		t.Errorf("second registry rest_client_requests_total series = %d, %v; want 2", n, err)
	}
	if n := testutil.CollectAndCount(b.respSize, "rest_client_response_size_bytes"); n != 0 {
		t.Errorf("second registry has %d response-size series, want 0 (observed before it was attached)", n)
	}
	if n := testutil.CollectAndCount(a.respSize, "rest_client_response_size_bytes"); n != 1 {
		t.Errorf("first registry response-size series = %d, want 1", n)
	}
}

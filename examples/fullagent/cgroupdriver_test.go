package main

import (
	"context"
	"errors"
	"testing"
)

// scriptedDriver answers CgroupDriver from a script, one entry per call.
type scriptedDriver struct {
	answers []driverAnswer
	calls   int
}

type driverAnswer struct {
	driver string
	err    error
}

var _ cgroupDriverSource = (*scriptedDriver)(nil)

func (s *scriptedDriver) CgroupDriver(context.Context) (string, error) {
	a := s.answers[min(s.calls, len(s.answers)-1)]
	s.calls++
	return a.driver, a.err
}

func TestCgroupDriverFromRuntime(t *testing.T) {
	transient := errors.New("connection refused")
	for _, tc := range []struct {
		name       string
		configured string
		answers    []driverAnswer
		want       string
		wantErr    bool
		wantCalls  int
	}{
		{name: "runtime says systemd: it overrides the config", configured: "cgroupfs",
			answers: []driverAnswer{{driver: "systemd"}}, want: "systemd", wantCalls: 1},
		{name: "runtime agrees", configured: "cgroupfs",
			answers: []driverAnswer{{driver: "cgroupfs"}}, want: "cgroupfs", wantCalls: 1},
		{name: "runtime does not say (containerd 1.6): the config stands", configured: "systemd",
			answers: []driverAnswer{{}}, want: "systemd", wantCalls: 1},
		{name: "transient error, then an answer", configured: "cgroupfs",
			answers: []driverAnswer{{err: transient}, {driver: "systemd"}}, want: "systemd", wantCalls: 2},
		{name: "errors three times: the start fails", configured: "cgroupfs",
			answers: []driverAnswer{{err: transient}}, wantErr: true, wantCalls: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &scriptedDriver{answers: tc.answers}
			got, err := cgroupDriverFromRuntime(t.Context(), rt, tc.configured, 0)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("cgroupDriverFromRuntime = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, transient) {
				t.Errorf("error %v does not wrap the runtime's", err)
			}
			if rt.calls != tc.wantCalls {
				t.Errorf("CgroupDriver called %d times, want %d", rt.calls, tc.wantCalls)
			}
		})
	}
}

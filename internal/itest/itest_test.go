package itest

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that records how a test stopped.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = true
	r.msg = format
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = format
}

func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		name        string
		env         string
		missing     error
		skip, fatal bool
	}{
		{name: "present", missing: nil},
		{name: "missing, not required", missing: errors.New("no etcd"), skip: true},
		{name: "missing, required", env: "1", missing: errors.New("no etcd"), fatal: true},
		{name: "present, required", env: "1", missing: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.env)
			r := &recorder{TB: t}
			Require(r, "etcd", tc.missing)
			if r.skipped != tc.skip || r.failed != tc.fatal {
				t.Errorf("skipped=%v failed=%v, want %v %v", r.skipped, r.failed, tc.skip, tc.fatal)
			}
		})
	}
}

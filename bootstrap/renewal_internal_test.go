package bootstrap

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestRotationDeadlineBounds(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := &x509.Certificate{NotBefore: from, NotAfter: from.Add(10 * time.Hour), Subject: nodeSubject("n1")}
	if got, want := rotationDeadline(leaf, 0), from.Add(7*time.Hour); !got.Equal(want) {
		t.Errorf("earliest deadline %v, want 70%% of the lifetime: %v", got, want)
	}
	if got, want := rotationDeadline(leaf, 0.5), from.Add(8*time.Hour); got.Sub(want).Abs() > time.Microsecond {
		t.Errorf("middle deadline %v, want 80%%: %v", got, want)
	}
	if got := rotationDeadline(leaf, 0.999999); !got.Before(from.Add(9*time.Hour)) || got.Before(from.Add(9*time.Hour-time.Second)) {
		t.Errorf("latest deadline %v, want just before 90%%: %v", got, from.Add(9*time.Hour))
	}

	// The Rotator's deadlines are jittered within [70%, 90%].
	clk := clocktesting.NewFakeClock(from.Add(time.Hour))
	r := &Rotator{cfg: Config{Clock: clk, NodeName: "n1"}, cert: &tls.Certificate{Leaf: leaf}}
	seen := map[time.Time]bool{}
	for range 200 {
		d := r.nextDeadline()
		if d.Before(from.Add(7*time.Hour)) || d.After(from.Add(9*time.Hour)) {
			t.Fatalf("deadline %v outside [70%%, 90%%] of [%v, %v]", d, leaf.NotBefore, leaf.NotAfter)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("%d distinct deadlines in 200, want them jittered", len(seen))
	}
}

func TestNextDeadlineNow(t *testing.T) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := from.Add(time.Hour)
	clk := clocktesting.NewFakeClock(now)
	mine := &x509.Certificate{NotBefore: from, NotAfter: from.Add(10 * time.Hour), Subject: nodeSubject("n1")}
	for _, tc := range []struct {
		name  string
		cert  *tls.Certificate
		force bool
	}{
		{"no certificate", nil, false},
		{"taken over", &tls.Certificate{Leaf: mine}, true},
		{"another node's", &tls.Certificate{Leaf: &x509.Certificate{NotBefore: from, NotAfter: mine.NotAfter, Subject: nodeSubject("n2")}}, false},
		{"not in system:nodes", &tls.Certificate{Leaf: &x509.Certificate{NotBefore: from, NotAfter: mine.NotAfter,
			Subject: pkix.Name{CommonName: "system:node:n1"}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Rotator{cfg: Config{Clock: clk, NodeName: "n1"}, cert: tc.cert, force: tc.force}
			if d := r.nextDeadline(); !d.Equal(now) {
				t.Errorf("deadline %v, want now (%v)", d, now)
			}
			if tc.force {
				if d := r.nextDeadline(); d.Equal(now) {
					t.Error("a forced renewal is forced again")
				}
			}
		})
	}
}

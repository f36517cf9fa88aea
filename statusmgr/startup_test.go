package statusmgr

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startupMoments records what the reporter told it.
type startupMoments struct{ attempts, registered, ready []time.Time }

func (s *startupMoments) RegistrationAttempted(t time.Time) { s.attempts = append(s.attempts, t) }
func (s *startupMoments) NodeRegistered(t time.Time)        { s.registered = append(s.registered, t) }
func (s *startupMoments) NodeReady(t time.Time)             { s.ready = append(s.ready, t) }

var _ StartupRecorder = (*startupMoments)(nil)

func TestNodeStartupMoments(t *testing.T) {
	s := &startupMoments{}
	f := newNodeFixture(t, NodeConfig{Startup: s})
	f.ready.set(ConditionState{Status: v1.ConditionFalse, Reason: "KubeletNotReady", Message: "starting"})
	if err := f.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(s.attempts) != 1 || len(s.registered) != 1 || len(s.ready) != 0 {
		t.Fatalf("after registering not ready: %+v", s)
	}
	f.clock.Step(10 * time.Second)
	f.ready.set(ConditionState{Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "ok"})
	if err := f.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(s.ready) != 1 || !s.ready[0].Equal(t0.Add(10*time.Second)) {
		t.Fatalf("ready moments %v, want one at %v", s.ready, t0.Add(10*time.Second))
	}

	// A Node that exists already is reconciled, not registered.
	s2 := &startupMoments{}
	f2 := newNodeFixture(t, NodeConfig{Startup: s2}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}})
	if err := f2.r.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(s2.attempts) != 1 || len(s2.registered) != 0 || len(s2.ready) != 1 {
		t.Fatalf("existing Node: %+v, want an attempt, no registration, ready", s2)
	}
}

package volumemgr

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestAChangeWakesOnlyItsPodsWaiters: a change of one pod's volumes wakes
// the calls waiting on that pod and no other; what the calls shared is
// forgotten once the last of them stops waiting, and a call woken late
// does not drop the next change's waiters.
func TestAChangeWakesOnlyItsPodsWaiters(t *testing.T) {
	m, err := New(Config{RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	a1, doneA1 := m.waitLocked("a")
	a2, doneA2 := m.waitLocked("a")
	b1, doneB1 := m.waitLocked("b")
	m.notifyLocked("b")
	if !closed(b1) {
		t.Fatal("b's change did not wake b's waiter")
	}
	if closed(a1) || closed(a2) {
		t.Fatal("b's change woke a's waiters")
	}
	b2, doneB2 := m.waitLocked("b")
	doneB1() // woken by the earlier change: must not drop b2's
	m.notifyLocked("b")
	if !closed(b2) {
		t.Fatal("a late done of an earlier waiter dropped the next waiter of b")
	}
	doneB2()
	doneA1()
	if m.waiting["a"] == nil {
		t.Fatal("a's waiters were dropped while one still waits")
	}
	doneA2()
	if len(m.waiting) != 0 {
		t.Fatalf("waiters left after every call stopped waiting: %v", m.waiting)
	}
	m.notifyAllLocked()
	if closed(a1) {
		t.Fatal("a notification reached a waiter that had stopped waiting")
	}
}

// TestWaitThatGivesUpLeavesNoWaiter: WaitForAttachAndMount ended by its
// context leaves nothing behind in the waiters' map.
func TestWaitThatGivesUpLeavesNoWaiter(t *testing.T) {
	m, err := New(Config{RootDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec: v1.PodSpec{
			Volumes:    []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			Containers: []v1.Container{{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/s"}}}},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := m.WaitForAttachAndMount(ctx, pod); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForAttachAndMount without a reconciler returned %v, want the context's deadline", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.waiting) != 0 {
		t.Fatalf("waiters left after the wait gave up: %v", m.waiting)
	}
}

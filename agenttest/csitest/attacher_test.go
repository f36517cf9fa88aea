package csitest_test

import (
	"slices"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/agenttest/csitest"
)

// TestAttacher: the attacher adds its finalizer to its driver's
// VolumeAttachments, marks them attached with the metadata after the
// delay (or failed while Fail is in force), leaves other drivers' alone,
// and removes its finalizer from one being deleted.
func TestAttacher(t *testing.T) {
	ctx := t.Context()
	va := func(name, attacher string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: "n"}}
	}
	cs := fake.NewClientset(va("mine", "csi.nodekit.test"), va("other", "other.driver"))
	clk := testingclock.NewFakeClock(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	a, err := csitest.NewAttacher(cs, csitest.AttacherConfig{Driver: "csi.nodekit.test", Delay: 2 * time.Second,
		Metadata: map[string]string{"devicePath": "/dev/x"}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) *storagev1.VolumeAttachment {
		t.Helper()
		v, err := cs.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sync := func() {
		t.Helper()
		if err := a.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.Fail("no disk")
	sync()
	if v := get("mine"); !slices.Equal(v.Finalizers, []string{"external-attacher/csi.nodekit.test"}) || v.Status.Attached || v.Status.AttachError != nil {
		t.Fatalf("before the delay: %+v", v)
	}
	clk.Step(2 * time.Second)
	sync()
	if v := get("mine"); v.Status.Attached || v.Status.AttachError == nil || v.Status.AttachError.Message != "no disk" {
		t.Fatalf("failing: %+v", v.Status)
	}
	a.Recover()
	sync()
	if v := get("mine"); !v.Status.Attached || v.Status.AttachError != nil || v.Status.AttachmentMetadata["devicePath"] != "/dev/x" {
		t.Fatalf("attached: %+v", v.Status)
	}
	if v := get("other"); len(v.Finalizers) != 0 || v.Status.Attached {
		t.Fatalf("another driver's attachment was touched: %+v", v)
	}
	v := get("mine")
	now := metav1.NewTime(clk.Now())
	v.DeletionTimestamp = &now
	if _, err := cs.StorageV1().VolumeAttachments().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sync()
	if v := get("mine"); len(v.Finalizers) != 0 {
		t.Fatalf("finalizers of a deleted attachment: %v", v.Finalizers)
	}
	if !slices.Equal(a.Attached(), []string{"mine"}) || !slices.Equal(a.Detached(), []string{"mine"}) {
		t.Fatalf("attached %v detached %v", a.Attached(), a.Detached())
	}
}

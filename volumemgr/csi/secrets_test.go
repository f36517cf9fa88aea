package csi_test

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// TestDriverSecrets: a PV's nodeStageSecretRef and nodePublishSecretRef
// (secrets in their own namespace) reach NodeStageVolume and
// NodePublishVolume with every data key; an inline volume's
// nodePublishSecretRef is read from the pod's namespace; a missing secret
// fails the set-up with upstream's message and nothing is staged.
func TestDriverSecrets(t *testing.T) {
	pvc, pv := boundClaim("default", "claim", "pv-1", "vol-1")
	pv.Spec.CSI.NodeStageSecretRef = &v1.SecretReference{Namespace: "storage", Name: "stage"}
	pv.Spec.CSI.NodePublishSecretRef = &v1.SecretReference{Namespace: "storage", Name: "publish"}
	missingPVC, missingPV := boundClaim("default", "other", "pv-2", "vol-2")
	missingPV.Spec.CSI.NodeStageSecretRef = &v1.SecretReference{Namespace: "storage", Name: "missing"}
	secret := func(ns, name string, data map[string]string) *v1.Secret {
		s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	e := newEnv(t, pvc, pv, missingPVC, missingPV,
		csiDriver(storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral),
		secret("storage", "stage", map[string]string{"user": "alice", "key": "s3cret"}),
		secret("storage", "publish", map[string]string{"token": "t1"}),
		secret("default", "inline-creds", map[string]string{"pw": "x"}))
	ev := &events{}
	m := e.manager(testingclock.NewFakeClock(time.Now()), ev)
	inline := podWith("i", "uid-2", v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: driverName, NodePublishSecretRef: &v1.LocalObjectReference{Name: "inline-creds"}}}})
	m.AddPod(podWith("p", "uid-1", pvcVolume("claim")))
	m.AddPod(inline)
	m.AddPod(podWith("q", "uid-3", pvcVolume("other")))
	m.Reconcile(e.ctx)

	got, err := e.drv.Secrets()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := []string{
		fmt.Sprintf("NodePublishVolume csi-%x pw=x", sha256.Sum256([]byte("uid-2scratch"))),
		"NodePublishVolume vol-1 token=t1",
		"NodeStageVolume vol-1 key=s3cret,user=alice",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("secrets the driver got:\n%q\nwant\n%q", got, want)
	}
	if len(m.MountedVolumes("uid-1")) != 1 || len(m.MountedVolumes("uid-2")) != 1 {
		t.Errorf("mounted: %v and %v, want one volume each", m.MountedVolumes("uid-1"), m.MountedVolumes("uid-2"))
	}
	if len(m.MountedVolumes("uid-3")) != 0 || slices.ContainsFunc(e.calls(), func(c string) bool { return strings.Contains(c, "vol-2") }) {
		t.Errorf("the volume with a missing secret was set up or reached the driver: %v", e.calls())
	}
	wantEvent := `fetching NodeStageSecretRef storage/missing failed: kubernetes.io/csi: failed to find the secret missing in the namespace storage with error: `
	if !slices.ContainsFunc(ev.all(), func(s string) bool { return strings.Contains(s, wantEvent) }) {
		t.Errorf("events %q, want one with %q", ev.all(), wantEvent)
	}
	for _, uid := range []types.UID{"uid-1", "uid-2", "uid-3"} {
		m.RemovePod(uid)
	}
	m.Reconcile(e.ctx)
}

package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/agenttest/csitest"
	"github.com/nodekit/nodekit/volumemgr/csi"
)

// attachAgent is one agent of TestCSIAttachSideBySide with its driver.
type attachAgent = csiSBSAgent

// TestCSIAttachSideBySide runs TestCSIAttach's scenario on the upstream
// kubelet v1.37.2 and on fullagent at once (each on its own node, with
// its own containerd and its own instance of the test driver), against
// one control plane with kube-controller-manager and one external
// attacher, and compares what each node shows: the
// controller-managed-attach-detach annotation, volumesInUse before the
// attachment, no driver call and no running pod while the attachment
// fails, the publish context at stage and publish once attached, and,
// after the pod is deleted, volumesInUse emptied and the
// VolumeAttachment deleted.
func TestCSIAttachSideBySide(t *testing.T) {
	cp, agents := startCSISideBySide(t, "att", "", csitest.Options{})
	client := cp.AdminClient()
	ctx := t.Context()
	if _, err := client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: csiTestDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	att := csitest.StartAttacher(t, client, csitest.AttacherConfig{Driver: csiTestDriver,
		Metadata: map[string]string{"devicePath": "/dev/nodekit0"}})
	att.Fail("rpc error: code = Unavailable desc = no disk yet")

	e := &env{client: client} // for createBoundClaim
	for _, a := range agents {
		createBoundClaim(t, e, "claim-"+a.name, "pv-"+a.name, "vol-"+a.name)
		pod := simplePod("att-"+a.name, v1.RestartPolicyAlways, "echo a > /data/a && sleep 3600")
		pod.Namespace, pod.Spec.NodeName = "default", a.node
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
		pod.Spec.Containers[0].Image = agenttest.BusyboxImage
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-" + a.name}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string][]string{}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeAttachPending(t, client, a)...)
	}
	att.Recover()
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeAttached(t, client, a)...)
	}
	for _, a := range agents {
		if err := client.CoreV1().Pods("default").Delete(ctx, "att-"+a.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		got[a.name] = append(got[a.name], observeDetached(t, client, a)...)
	}
	compareAgents(t, got)
}

func attachUnique(a *attachAgent) v1.UniqueVolumeName {
	return csi.UniqueVolumeName(csiTestDriver, "vol-"+a.name)
}

func attachName(a *attachAgent) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte("vol-"+a.name+csiTestDriver+a.node)))
}

// observeAttachPending: what the node shows while the attacher fails.
func observeAttachPending(t *testing.T, client kubernetes.Interface, a *attachAgent) []string {
	t.Helper()
	ctx := t.Context()
	var out []string
	n, err := client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, "annotation="+n.Annotations[controllerManagedAttachAnnotation])
	inUse := false
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !inUse {
		n, err := client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
		inUse = err == nil && slices.Equal(n.Status.VolumesInUse, []v1.UniqueVolumeName{attachUnique(a)})
		time.Sleep(250 * time.Millisecond)
	}
	out = append(out, fmt.Sprintf("volumesInUse before attach=%v", inUse))
	time.Sleep(5 * time.Second)
	p, err := client.CoreV1().Pods("default").Get(ctx, "att-"+a.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := a.drv.Calls()
	staged := slices.ContainsFunc(calls, func(c string) bool { return strings.Contains(c, "vol-"+a.name) })
	out = append(out, fmt.Sprintf("while failing: phase=%s driver called=%v", p.Status.Phase, staged))
	return append(out, "while failing: "+attachWarnings(t, client, "att-"+a.name))
}

// attachWarnings sums up the Warning events of the pod: the attach/detach
// controller's reasons and the node's, sorted.
func attachWarnings(t *testing.T, client kubernetes.Interface, pod string) string {
	t.Helper()
	evs, err := client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	var controller, node []string
	for _, ev := range evs.Items {
		if ev.Type != v1.EventTypeWarning {
			continue
		}
		if ev.Source.Component == "attachdetach-controller" || ev.ReportingController == "attachdetach-controller" {
			controller = append(controller, ev.Reason+": "+strings.ReplaceAll(ev.Message, "pv-"+strings.TrimPrefix(pod, "att-"), "PV"))
		} else {
			node = append(node, ev.Reason)
		}
	}
	slices.Sort(controller)
	slices.Sort(node)
	return fmt.Sprintf("controller warnings=%q node warnings=%q", slices.Compact(controller), slices.Compact(node))
}

// observeAttached: the pod once attached, and the publish context.
func observeAttached(t *testing.T, client kubernetes.Interface, a *attachAgent) []string {
	t.Helper()
	running := false
	poll := func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "att-"+a.name, metav1.GetOptions{})
		running = err == nil && p.Status.Phase == v1.PodRunning
		return running, nil
	}
	deadline := time.Now().Add(180 * time.Second)
	for time.Now().Before(deadline) {
		if ok, _ := poll(t.Context()); ok {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	pc, _ := a.drv.PublishContexts()
	for i := range pc {
		pc[i] = strings.ReplaceAll(pc[i], "vol-"+a.name, "VOL")
	}
	return []string{fmt.Sprintf("after attach: running=%v", running), fmt.Sprintf("publish contexts=%q", pc)}
}

// observeDetached: volumesInUse and the VolumeAttachment after the pod
// went.
func observeDetached(t *testing.T, client kubernetes.Interface, a *attachAgent) []string {
	t.Helper()
	ctx := t.Context()
	emptied, deleted := false, false
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) && (!emptied || !deleted) {
		n, err := client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
		emptied = err == nil && len(n.Status.VolumesInUse) == 0
		_, err = client.StorageV1().VolumeAttachments().Get(ctx, attachName(a), metav1.GetOptions{})
		deleted = apierrors.IsNotFound(err)
		time.Sleep(500 * time.Millisecond)
	}
	calls, _ := a.drv.Calls()
	unstaged := slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "NodeUnstageVolume vol-"+a.name) })
	return []string{fmt.Sprintf("after delete: volumesInUse empty=%v VolumeAttachment deleted=%v unstaged=%v", emptied, deleted, unstaged)}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

func mounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mountsOf returns the /proc/mounts lines under a pod's directory.
func mountsOf(t *testing.T, uid types.UID) []string {
	var out []string
	for _, l := range strings.Split(mounts(t), "\n") {
		if strings.Contains(l, "/pods/"+string(uid)+"/") {
			out = append(out, l)
		}
	}
	return out
}

func TestVolumes(t *testing.T) {
	e := startEnv(t)
	ctx := t.Context()

	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config"}, Data: map[string]string{"greeting": "hello", "color": "blue"}}
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret"}, StringData: map[string]string{"password": "s3cret"}}
	if _, err := e.client.CoreV1().Secrets("default").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pod := simplePod("volumes", v1.RestartPolicyAlways, "sleep 3600")
	pod.Labels = map[string]string{"tier": "one"}
	mem := v1.StorageMediumMemory
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "app-secret"}}},
		{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
		{Name: "shared", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "ram", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: mem}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "cfg", MountPath: "/etc/cfg"},
		{Name: "cfg", MountPath: "/etc/greeting", SubPath: "greeting"},
		{Name: "sec", MountPath: "/etc/sec"},
		{Name: "info", MountPath: "/etc/info"},
		{Name: "shared", MountPath: "/shared"},
		{Name: "ram", MountPath: "/ram"},
	}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
		Name: "writer", Command: []string{"sh", "-c", "echo from-writer > /data/note; sleep 3600"},
		VolumeMounts: []v1.VolumeMount{{Name: "shared", MountPath: "/data"}},
	})
	e.createPod(t, pod)
	p := e.waitPod(t, "volumes", 90*time.Second, "Running", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && ready(p, "app") && ready(p, "writer")
	})

	t.Run("configMap volume and subPath file", func(t *testing.T) {
		if got := e.exec(t, p, "app", "cat", "/etc/cfg/greeting"); got != "hello" {
			t.Fatalf("configMap file: %q", got)
		}
		if got := e.exec(t, p, "app", "cat", "/etc/greeting"); got != "hello" {
			t.Fatalf("subPath file: %q", got)
		}
	})

	t.Run("secret volume on tmpfs", func(t *testing.T) {
		if got := e.exec(t, p, "app", "cat", "/etc/sec/password"); got != "s3cret" {
			t.Fatalf("secret file: %q", got)
		}
		var tmpfs bool
		for _, l := range mountsOf(t, p.UID) {
			tmpfs = tmpfs || (strings.Contains(l, "kubernetes.io~secret/sec") && strings.HasPrefix(l, "tmpfs "))
		}
		if !tmpfs {
			t.Fatalf("secret volume is not a tmpfs: %v", mountsOf(t, p.UID))
		}
	})

	t.Run("emptyDir shared and medium Memory is tmpfs", func(t *testing.T) {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			out, code, _ := e.tryExec(t, p, "app", "cat", "/shared/note")
			return code == 0 && out == "from-writer\n", nil
		})
		if err != nil {
			t.Fatal("the app never saw the writer's file in the shared emptyDir")
		}
		if out := e.exec(t, p, "app", "sh", "-c", "grep ' /ram ' /proc/mounts"); !strings.HasPrefix(out, "tmpfs ") {
			t.Fatalf("/ram is not tmpfs: %q", out)
		}
	})

	t.Run("projected service-account token is valid", func(t *testing.T) {
		tok := e.exec(t, p, "app", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token")
		if parts := strings.Split(tok, "."); len(parts) != 3 {
			t.Fatalf("not a JWT: %q", tok)
		}
		rev, err := e.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rev.Status.Authenticated || rev.Status.User.Username != "system:serviceaccount:default:default" {
			t.Fatalf("token review: %+v", rev.Status)
		}
		if ca := e.exec(t, p, "app", "cat", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"); !strings.Contains(ca, "BEGIN CERTIFICATE") {
			t.Fatalf("ca.crt: %q", ca)
		}
	})

	t.Run("configMap and downwardAPI updates propagate", func(t *testing.T) {
		cm.Data["greeting"] = "bonjour"
		if _, err := e.client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"tier": "two"}}})
		if _, err := e.client.CoreV1().Pods("default").Patch(ctx, "volumes", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := wait.PollUntilContextTimeout(ctx, time.Second, 60*time.Second, true, func(context.Context) (bool, error) {
			cfg, _, _ := e.tryExec(t, p, "app", "cat", "/etc/cfg/greeting")
			labels, _, _ := e.tryExec(t, p, "app", "cat", "/etc/info/labels")
			return cfg == "bonjour" && strings.Contains(labels, `tier="two"`), nil
		})
		if err != nil {
			t.Fatal("configMap or label update not visible in the container within 60s")
		}
		t.Logf("updates visible after %v", time.Since(start).Round(time.Second))
	})

	t.Run("subPath symlink escape is refused", func(t *testing.T) {
		bad := simplePod("escape", v1.RestartPolicyAlways, "sleep 3600")
		bad.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		bad.Spec.InitContainers = []v1.Container{{Name: "plant", Command: []string{"ln", "-s", "/etc", "/scratch/evil"},
			VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}}
		bad.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/mnt", SubPath: "evil"}}
		e.createPod(t, bad)
		p := e.waitPod(t, "escape", 60*time.Second, "refused with CreateContainerConfigError", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "CreateContainerConfigError"
		})
		if c := containerStatus(p, "app"); c.ContainerID != "" {
			t.Fatalf("the container ran with an escaping subPath: %+v", c)
		}
	})

	t.Run("hostPath File on a missing path stays Pending", func(t *testing.T) {
		file := v1.HostPathFile
		hp := simplePod("hostpath", v1.RestartPolicyAlways, "sleep 3600")
		hp.Spec.Volumes = []v1.Volume{{Name: "f", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/nonexistent/nodekit-file", Type: &file}}}}
		hp.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "f", MountPath: "/f"}}
		e.createPod(t, hp)
		e.waitEvent(t, "hostpath", "FailedMount", "/nonexistent/nodekit-file")
		e.waitPod(t, "hostpath", 30*time.Second, "Pending in ContainerCreating", func(p *v1.Pod) bool {
			c := containerStatus(p, "app")
			return p.Status.Phase == v1.PodPending && c != nil && c.State.Waiting != nil && c.State.Waiting.Reason == "ContainerCreating"
		})
	})

	t.Run("deletion removes dirs and mounts", func(t *testing.T) {
		zero := int64(0)
		if err := e.client.CoreV1().Pods("default").Delete(ctx, "volumes", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			return len(mountsOf(t, p.UID)) == 0 && !dirExists(e.rootDir+"/pods/"+string(p.UID)), nil
		})
		if err != nil {
			t.Fatalf("after deletion: mounts %v, dir exists %v", mountsOf(t, p.UID), dirExists(e.rootDir+"/pods/"+string(p.UID)))
		}
	})
}

func dirExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

package volumemgr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/volumemgr"
)

func TestConfigMapVolumeFollowsItsConfigMap(t *testing.T) {
	f := newFixture(t)
	f.objs.SetConfigMap(configMap("settings", map[string]string{"level": "debug", "color": "blue"}))
	pod := testPod("web", v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "settings"},
		Items:                []v1.KeyToPath{{Key: "level", Path: "conf/level", Mode: ptr.To[int32](0o600)}},
	}}})
	f.mount(pod)
	dir := f.volumeDir(pod.UID, volumemgr.ConfigMapPluginName, "cfg")
	if got := f.mounts(pod, 0)["cfg"]; got != dir {
		t.Fatalf("host path = %s, want %s", got, dir)
	}
	ms, _ := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
	if !ms[0].ReadOnly || ms[0].ContainerPath != "/mnt/cfg" {
		t.Fatalf("mount = %+v, want read-only at /mnt/cfg", ms[0])
	}
	level := filepath.Join(dir, "conf", "level")
	if readFile(t, level) != "debug" || fileMode(t, level).Perm() != 0o600 {
		t.Fatalf("conf/level = %q mode %v", readFile(t, level), fileMode(t, level))
	}
	if exists(filepath.Join(dir, "color")) {
		t.Fatal("a key not in items was written")
	}
	if len(f.mnt.Below(dir)) != 0 {
		t.Fatal("a configMap volume must live on disk, not tmpfs")
	}

	// An update shows up at the next refresh, not before.
	f.objs.SetConfigMap(configMap("settings", map[string]string{"level": "info"}))
	f.step(volumemgr.DefaultRefreshPeriod - time.Second)
	if readFile(t, level) != "debug" {
		t.Fatal("refreshed before the refresh period")
	}
	f.step(time.Second)
	if readFile(t, level) != "info" {
		t.Fatalf("after the refresh period conf/level = %q, want info", readFile(t, level))
	}

	// A ConfigMap deleted later keeps the last content (and reports it).
	f.objs.DeleteConfigMap("ns", "settings")
	f.step(volumemgr.DefaultRefreshPeriod)
	if readFile(t, level) != "info" {
		t.Fatal("content lost after a failed refresh")
	}
	if ev := f.events.all(); !contains(ev, `Warning FailedMount MountVolume.SetUp failed for volume "cfg" : configmap "settings" not found`) {
		t.Fatalf("events = %q", ev)
	}
}

func TestSecretVolumeOnTmpfs(t *testing.T) {
	f := newFixture(t)
	f.objs.SetSecret(secret("creds", map[string]string{"user": "admin", "pass": "pw"}))
	pod := testPod("db", v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
		SecretName: "creds", DefaultMode: ptr.To[int32](0o400),
	}}})
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	f.mount(pod)
	dir := f.volumeDir(pod.UID, volumemgr.SecretPluginName, "creds")
	mps := f.mnt.Below(dir)
	if len(mps) != 1 || mps[0].Path != dir || mps[0].Type != "tmpfs" {
		t.Fatalf("mounts below %s = %v, want one tmpfs", dir, mps)
	}
	if calls := f.mnt.Calls(); !contains(calls, "mount tmpfs tmpfs "+dir+" size=67108864") {
		t.Fatalf("tmpfs not sized by the pod's memory limit: %q", calls)
	}
	for k, v := range map[string]string{"user": "admin", "pass": "pw"} {
		p := filepath.Join(dir, k)
		if readFile(t, p) != v || fileMode(t, p).Perm() != 0o400 {
			t.Fatalf("%s = %q mode %v", k, readFile(t, p), fileMode(t, p))
		}
	}

	// Missing secret: upstream's message, and an optional one is empty.
	missing := testPod("nope", v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "absent"}}})
	f.m.AddPod(missing)
	f.reconcile()
	if ev := f.events.all(); !contains(ev, `MountVolume.SetUp failed for volume "s" : secret "absent" not found`) {
		t.Fatalf("events = %q", ev)
	}
	opt := testPod("opt", v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "absent", Optional: ptr.To(true)}}})
	f.mount(opt)
	entries, _ := os.ReadDir(f.volumeDir(opt.UID, volumemgr.SecretPluginName, "s"))
	if len(entries) != 2 { // ..data and the version directory
		t.Fatalf("optional missing secret wrote %d entries", len(entries))
	}
}

func TestDownwardAPIVolumeFollowsLabels(t *testing.T) {
	f := newFixture(t)
	pod := testPod("web", v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
		Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		},
	}}})
	pod.Labels = map[string]string{"app": "web"}
	f.mount(pod)
	dir := f.volumeDir(pod.UID, volumemgr.DownwardAPIPluginName, "info")
	if got := readFile(t, filepath.Join(dir, "labels")); got != `app="web"` {
		t.Fatalf("labels = %q", got)
	}
	if len(f.mnt.Below(dir)) != 1 {
		t.Fatal("a downwardAPI volume must be on tmpfs")
	}
	updated := pod.DeepCopy()
	updated.Labels["tier"] = "front"
	f.m.AddPod(updated) // what the pod worker's next WaitForAttachAndMount does
	f.reconcile()       // no clock step: a label change refreshes at once
	if got := readFile(t, filepath.Join(dir, "labels")); got != "app=\"web\"\ntier=\"front\"" {
		t.Fatalf("labels after update = %q", got)
	}
}

// kubeAPIAccess is the projected volume the ServiceAccount admission plugin
// adds to pods.
func kubeAPIAccess(expiration int64) v1.Volume {
	return v1.Volume{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o644),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: &expiration, Path: "token"}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

func TestProjectedServiceAccountVolume(t *testing.T) {
	f := newFixture(t)
	f.objs.SetConfigMap(configMap("kube-root-ca.crt", map[string]string{"ca.crt": "CA PEM"}))
	f.objs.SetSecret(secret("extra", map[string]string{"k": "v"}))
	vol := kubeAPIAccess(3607)
	vol.Projected.Sources = append(vol.Projected.Sources, v1.VolumeProjection{Secret: &v1.SecretProjection{
		LocalObjectReference: v1.LocalObjectReference{Name: "extra"}, Items: []v1.KeyToPath{{Key: "k", Path: "extra/k"}}}})
	pod := testPod("web", vol)
	pod.Spec.ServiceAccountName = "builder"
	f.mount(pod)
	dir := f.volumeDir(pod.UID, volumemgr.ProjectedPluginName, "kube-api-access")
	for p, want := range map[string]string{"token": "token-1", "ca.crt": "CA PEM", "namespace": "ns", "extra/k": "v"} {
		if got := readFile(t, filepath.Join(dir, p)); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if m := fileMode(t, filepath.Join(dir, "token")).Perm(); m != 0o644 {
		t.Errorf("token mode = %v, want defaultMode 0644", m)
	}
	if len(f.mnt.Below(dir)) != 1 {
		t.Fatal("a projected volume must be on tmpfs")
	}
	calls := f.tokens.Calls()
	if len(calls) != 1 {
		t.Fatalf("token requests = %d", len(calls))
	}
	c := calls[0]
	ref := c.Request.Spec.BoundObjectRef
	if c.Namespace != "ns" || c.ServiceAccount != "builder" || *c.Request.Spec.ExpirationSeconds != 3607 ||
		ref == nil || ref.Kind != "Pod" || ref.Name != "web" || ref.UID != pod.UID || c.Request.Spec.Audiences != nil {
		t.Fatalf("token request = %+v %+v", c, c.Request.Spec)
	}

	// A user common to every container owns the token, mode 0600.
	owned := testPod("owned", kubeAPIAccess(3607))
	owned.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To(int64(os.Getuid()))}
	f.mount(owned)
	tok := filepath.Join(f.volumeDir(owned.UID, volumemgr.ProjectedPluginName, "kube-api-access"), "token")
	info, err := os.Stat(tok)
	if err != nil || info.Mode().Perm() != 0o600 || int(info.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
		t.Fatalf("token of a pod with runAsUser: %v %v", info.Mode(), err)
	}

	// An audience is passed on.
	aud := testPod("aud", kubeAPIAccess(600))
	aud.Spec.Volumes[0].Projected.Sources[0].ServiceAccountToken.Audience = "vault"
	f.mount(aud)
	if last := f.tokens.Calls()[len(f.tokens.Calls())-1]; fmt.Sprint(last.Request.Spec.Audiences) != "[vault]" || *last.Request.Spec.ExpirationSeconds != 600 {
		t.Fatalf("token request with an audience: %+v", last.Request.Spec)
	}

	// Every failing source is reported.
	bad := testPod("bad", v1.Volume{Name: "p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}}},
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "extra"}, Items: []v1.KeyToPath{{Key: "nope", Path: "x"}}}},
	}}}})
	f.m.AddPod(bad)
	f.reconcile()
	if ev := f.events.all(); !contains(ev, `MountVolume.SetUp failed for volume "p" : [configmap "absent" not found, references non-existent secret key: nope]`) {
		t.Fatalf("events = %q", ev)
	}
}

func TestProjectedTokenRefreshedAt80PercentOfLifetime(t *testing.T) {
	f := newFixture(t)
	f.objs.SetConfigMap(configMap("kube-root-ca.crt", map[string]string{"ca.crt": "CA"}))
	pod := testPod("web", kubeAPIAccess(600))
	f.mount(pod)
	token := filepath.Join(f.volumeDir(pod.UID, volumemgr.ProjectedPluginName, "kube-api-access"), "token")
	// Refreshes every minute rewrite the volume, but reuse the token until
	// 80% of its 600 s (480 s).
	for range 7 {
		f.step(time.Minute)
	}
	f.step(59 * time.Second) // 479 s
	if n := len(f.tokens.Calls()); n != 1 || readFile(t, token) != "token-1" {
		t.Fatalf("at 479 s: %d requests, token %q", n, readFile(t, token))
	}
	f.step(time.Second) // 480 s
	if n := len(f.tokens.Calls()); n != 2 || readFile(t, token) != "token-2" {
		t.Fatalf("at 480 s: %d requests, token %q", n, readFile(t, token))
	}
	if at := f.tokens.Calls()[1].At.Sub(epoch); at != 480*time.Second {
		t.Fatalf("second request at %v", at)
	}

	// A failed refresh keeps the valid token and retries 10 s later.
	f.tokens.Fail(errors.New("apiserver down"))
	f.step(480 * time.Second) // 960 s: due
	if n := len(f.tokens.Calls()); n != 3 || readFile(t, token) != "token-2" {
		t.Fatalf("failed refresh: %d requests, token %q", n, readFile(t, token))
	}
	f.step(9 * time.Second)
	if n := len(f.tokens.Calls()); n != 3 {
		t.Fatalf("retried before 10 s: %d requests", n)
	}
	f.tokens.Fail(nil)
	f.step(time.Second)
	if n := len(f.tokens.Calls()); n != 4 || readFile(t, token) != "token-4" {
		t.Fatalf("retry: %d requests, token %q", n, readFile(t, token))
	}

	// An expired token is dropped; if no new one comes, the refresh fails
	// (the volume keeps its content).
	f.tokens.Fail(errors.New("apiserver down"))
	f.step(700 * time.Second)
	if ev := f.events.all(); !contains(ev, `MountVolume.SetUp failed for volume "kube-api-access" : failed to fetch token: apiserver down`) {
		t.Fatalf("events = %q", ev)
	}
}

func TestEmptyDirVolumes(t *testing.T) {
	f := newFixture(t, func(c *volumemgr.Config) {
		c.NodeAllocatable = v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	})
	gid := int64(os.Getgid())
	pod := testPod("web",
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "cache", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
			Medium: v1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("16Mi"))}}},
	)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &gid}
	// Both containers of the pod share the volumes.
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "side", VolumeMounts: pod.Spec.Containers[0].VolumeMounts})
	f.mount(pod)
	scratch := f.volumeDir(pod.UID, volumemgr.EmptyDirPluginName, "scratch")
	cache := f.volumeDir(pod.UID, volumemgr.EmptyDirPluginName, "cache")
	if f.mounts(pod, 0)["scratch"] != scratch || f.mounts(pod, 1)["scratch"] != scratch {
		t.Fatal("containers do not share the emptyDir")
	}
	if m := fileMode(t, scratch); m.Perm() != 0o777 || m&os.ModeSetgid == 0 {
		t.Fatalf("emptyDir mode = %v, want 0777 with setgid (fsGroup)", m)
	}
	if len(f.mnt.Below(scratch)) != 0 {
		t.Fatal("a disk emptyDir was mounted")
	}
	if !contains(f.mnt.Calls(), "mount tmpfs tmpfs "+cache+" size=16777216") {
		t.Fatalf("memory emptyDir: calls %q", f.mnt.Calls())
	}
	ms, _ := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
	if ms[0].ReadOnly || ms[1].ReadOnly {
		t.Fatal("emptyDir mounts must be writable")
	}

	bad := testPod("huge", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: "Floppy"}}})
	f.m.AddPod(bad)
	f.reconcile()
	if ev := f.events.all(); !contains(ev, `MountVolume.SetUp failed for volume "h" : unknown storage medium "Floppy"`) {
		t.Fatalf("events = %q", ev)
	}
}

func TestHostPathFileMissingFailsClearly(t *testing.T) {
	f := newFixture(t)
	missing := filepath.Join(t.TempDir(), "no-such-file")
	pod := testPod("web", v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{
		Path: missing, Type: ptr.To(v1.HostPathFile)}}})
	f.m.AddPod(pod)
	f.reconcile()
	why := fmt.Sprintf("hostPath type check failed, %s is not a file, unable to determine its type: path %q does not exist", missing, missing)
	if ev := f.events.all(); len(ev) != 1 || ev[0] != `Warning FailedMount MountVolume.SetUp failed for volume "host" : `+why {
		t.Fatalf("events = %q", ev)
	}
	// Retried with back-off: not before 500 ms, then 1 s.
	f.step(499 * time.Millisecond)
	if n := len(f.events.all()); n != 1 {
		t.Fatalf("retried before the back-off: %d events", n)
	}
	f.step(time.Millisecond)
	f.step(999 * time.Millisecond)
	if n := len(f.events.all()); n != 2 {
		t.Fatalf("back-off did not double: %d events", n)
	}

	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	err := f.m.WaitForAttachAndMount(ctx, pod)
	want := `unmounted volumes=[host], unattached volumes=[], failed to process volumes=[]: context canceled; volume "host": ` + why
	if fmt.Sprint(err) != want {
		t.Fatalf("WaitForAttachAndMount = %v\nwant %s", err, want)
	}

	// Once the file exists the volume mounts, writable, at the host path.
	if err := os.WriteFile(missing, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.step(2 * time.Second)
	if got := f.mounts(pod, 0)["host"]; got != missing {
		t.Fatalf("hostPath mount = %q", got)
	}
	bad := testPod("dots", v1.Volume{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/var/../etc"}}})
	f.m.AddPod(bad)
	f.reconcile()
	if ev := f.events.all(); !contains(ev, "invalid HostPath `/var/../etc`: must not contain '..'") {
		t.Fatalf("events = %q", ev)
	}
}

func TestUnusedAndUnsupportedVolumes(t *testing.T) {
	f := newFixture(t)
	pod := testPod("web", v1.Volume{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}})
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "unused", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "absent"}}})
	f.m.AddPod(pod)
	f.reconcile()
	// No set-up is tried for either: the claim has no plugin, the secret
	// is mounted by no container. The waiter is told about the claim only.
	if ev := f.events.all(); len(ev) != 0 {
		t.Fatalf("events = %q", ev)
	}
	err := f.m.WaitForAttachAndMount(f.ctx, pod)
	want := `unmounted volumes=[pvc], unattached volumes=[], failed to process volumes=[pvc]: failed to get Plugin from volumeSpec for volume "pvc" err=no volume plugin matched: persistentVolumeClaim volumes are not supported by this node agent`
	if fmt.Sprint(err) != want {
		t.Fatalf("WaitForAttachAndMount = %v\nwant %s", err, want)
	}
}

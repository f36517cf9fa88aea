package podconfig

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDecodeManifestValid(t *testing.T) {
	web := mustDecode(t, "web.yaml")[0]
	c := web.Spec.Containers[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"namespace left for the source", web.Namespace, ""},
		{"restartPolicy", web.Spec.RestartPolicy, v1.RestartPolicyAlways},
		{"dnsPolicy", web.Spec.DNSPolicy, v1.DNSClusterFirst},
		{"terminationGracePeriodSeconds", *web.Spec.TerminationGracePeriodSeconds, int64(30)},
		{"schedulerName", web.Spec.SchedulerName, "default-scheduler"},
		{"enableServiceLinks", *web.Spec.EnableServiceLinks, true},
		{"priority", *web.Spec.Priority, int32(0)},
		{"securityContext", web.Spec.SecurityContext != nil, true},
		{"terminationMessagePath", c.TerminationMessagePath, "/dev/termination-log"},
		{"terminationMessagePolicy", c.TerminationMessagePolicy, v1.TerminationMessageReadFile},
		{"imagePullPolicy of a tag", c.ImagePullPolicy, v1.PullIfNotPresent},
		{"port protocol", c.Ports[0].Protocol, v1.ProtocolTCP},
		{"no hostPort without hostNetwork", c.Ports[0].HostPort, int32(0)},
		{"probe period", c.LivenessProbe.PeriodSeconds, int32(10)},
		{"probe timeout", c.LivenessProbe.TimeoutSeconds, int32(1)},
		{"probe failure threshold", c.LivenessProbe.FailureThreshold, int32(3)},
		{"probe success threshold", c.LivenessProbe.SuccessThreshold, int32(1)},
		{"probe http path", c.LivenessProbe.HTTPGet.Path, "/"},
		{"probe http scheme", c.LivenessProbe.HTTPGet.Scheme, v1.URISchemeHTTP},
		{"requests from limits", c.Resources.Requests.Cpu().String(), "500m"},
		{"kind", web.Kind, "Pod"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("web.yaml %s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}

	etcd := mustDecode(t, "etcd.json")[0]
	for _, ck := range []struct {
		name      string
		got, want any
	}{
		{"namespace kept", etcd.Namespace, "kube-system"},
		{"system-node-critical priority", *etcd.Spec.Priority, int32(2000001000)},
		{"no tag: Always", etcd.Spec.Containers[0].ImagePullPolicy, v1.PullAlways},
		{"digest: IfNotPresent", etcd.Spec.InitContainers[0].ImagePullPolicy, v1.PullIfNotPresent},
		{"hostNetwork hostPort", etcd.Spec.Containers[0].Ports[0].HostPort, int32(2379)},
		{"volume without source is emptyDir", etcd.Spec.Volumes[0].EmptyDir != nil, true},
	} {
		if ck.got != ck.want {
			t.Errorf("etcd.json %s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}

	list := mustDecode(t, "list.yaml")
	if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list.yaml = %d pods, want a and b", len(list))
	}
	if got := list[0].Spec.Containers[0].ImagePullPolicy; got != v1.PullAlways {
		t.Errorf("list.yaml a: :latest pull policy = %s, want Always", got)
	}
	if got := list[1].Spec.Containers[0].ImagePullPolicy; got != v1.PullAlways {
		t.Errorf("list.yaml b: registry port, no tag: pull policy = %s, want Always", got)
	}
	if got := list[1].Spec.RestartPolicy; got != v1.RestartPolicyNever {
		t.Errorf("list.yaml b: restartPolicy = %s, want Never (kept)", got)
	}
}

func mustDecode(t *testing.T, name string) []*v1.Pod {
	t.Helper()
	pods, err := DecodeManifest(readTestdata(t, name), name)
	if err != nil {
		t.Fatalf("DecodeManifest(%s): %v", name, err)
	}
	return pods
}

func TestDecodeManifestInvalid(t *testing.T) {
	const pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n"
	cases := []struct {
		name      string
		data      string
		file      string // testdata/manifests file instead of data
		wantField string // a FieldError with this Field must be reported
		wantText  string // and the message must contain this
	}{
		{name: "unknown field", file: "bad-unknown-field.yaml", wantField: "spec.containers[1].imagePullPolcy", wantText: "unknown field"},
		{name: "no name", file: "bad-no-name.yaml", wantField: "metadata.name", wantText: "required"},
		{name: "container name not a DNS label", file: "bad-container-name.yaml", wantField: "spec.containers[1].name", wantText: "Not_A_Label"},
		{name: "duplicate volume", file: "bad-duplicate-volume.yaml", wantField: "spec.volumes[1].name", wantText: `duplicate volume name "data"`},
		{name: "duplicate container across init and regular",
			data:      pod + "  initContainers: [{name: c, image: i}]\n  containers: [{name: c, image: i}]\n",
			wantField: "spec.containers[0].name", wantText: "duplicate container name"},
		{name: "no containers", data: pod + "  containers: []\n", wantField: "spec.containers", wantText: "at least one"},
		{name: "no image", data: pod + "  containers: [{name: c}]\n", wantField: "spec.containers[0].image", wantText: "required"},
		{name: "blank image", data: pod + "  containers: [{name: c, image: ' '}]\n", wantField: "spec.containers[0].image", wantText: "required"},
		{name: "init container without image", data: pod + "  initContainers: [{name: i}]\n  containers: [{name: c, image: x}]\n", wantField: "spec.initContainers[0].image"},
		{name: "unknown field at top", data: pod + "  containers: [{name: c, image: x}]\nfoo: 1\n", wantField: "foo", wantText: "unknown field"},
		{name: "duplicate field", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\nspec: {containers: [{name: c, image: x}]}\n", wantText: "duplicate"},
		{name: "wrong type", data: pod + "  containers: [{name: c, image: x, ports: 80}]\n", wantField: "spec.containers.ports", wantText: "cannot decode"},
		{name: "wrong kind", data: "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", wantField: "kind", wantText: "Service"},
		{name: "wrong apiVersion", data: "apiVersion: apps/v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: x}]}\n", wantField: "apiVersion"},
		{name: "empty", data: "", wantText: "empty manifest"},
		{name: "comments only", data: "# nothing\n---\n# here\n", wantText: "empty manifest"},
		{name: "two documents", data: pod + "  containers: [{name: c, image: x}]\n---\n" + pod + "  containers: [{name: c, image: x}]\n", wantText: "more than one YAML document"},
		{name: "not an object", data: "[1, 2]\n", wantText: "not an object"},
		{name: "bad YAML", data: "kind: Pod\n  bad: [indent\n", wantText: "document 1"},
		{name: "restart policy", data: pod + "  restartPolicy: Sometimes\n  containers: [{name: c, image: x}]\n", wantField: "spec.restartPolicy", wantText: "Sometimes"},
		{name: "pull policy", data: pod + "  containers: [{name: c, image: x, imagePullPolicy: Often}]\n", wantField: "spec.containers[0].imagePullPolicy"},
		{name: "port out of range", data: pod + "  containers: [{name: c, image: x, ports: [{containerPort: 70000}]}]\n", wantField: "spec.containers[0].ports[0].containerPort"},
		{name: "mount of a missing volume", data: pod + "  containers: [{name: c, image: x, volumeMounts: [{name: v, mountPath: /v}]}]\n", wantField: "spec.containers[0].volumeMounts[0].name"},
		{name: "secret volume", data: pod + "  containers: [{name: c, image: x}]\n  volumes: [{name: s, secret: {secretName: s}}]\n", wantField: "spec.volumes[0]", wantText: "secrets"},
		{name: "service account", data: pod + "  serviceAccountName: sa\n  containers: [{name: c, image: x}]\n", wantField: "spec.serviceAccountName"},
		{name: "configmap env", data: pod + "  containers: [{name: c, image: x, env: [{name: A, valueFrom: {configMapKeyRef: {name: m, key: k}}}]}]\n", wantField: "spec.containers[0].env[0].valueFrom.configMapKeyRef"},
		{name: "ephemeral containers", data: pod + "  containers: [{name: c, image: x}]\n  ephemeralContainers: [{name: e, image: x}]\n", wantField: "spec.ephemeralContainers"},
		{name: "probe without handler", data: pod + "  containers: [{name: c, image: x, readinessProbe: {periodSeconds: 3}}]\n", wantField: "spec.containers[0].readinessProbe"},
		{name: "name not a subdomain", data: "apiVersion: v1\nkind: Pod\nmetadata: {name: Web_1}\nspec: {containers: [{name: c, image: x}]}\n", wantField: "metadata.name"},
		{name: "list item path", data: "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: x}]}\n- metadata: {name: b}\n  spec: {containers: [{name: C, image: x}]}\n", wantField: "items[1].spec.containers[0].name"},
		{name: "list unknown field", data: "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: x, tty2: true}]}\n", wantField: "items[0].spec.containers[0].tty2"},
		{name: "too large", data: strings.Repeat("#", MaxManifestBytes+1), wantText: "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, source := []byte(tc.data), "/etc/kubernetes/manifests/"+strings.ReplaceAll(tc.name, " ", "-")+".yaml"
			if tc.file != "" {
				data, source = readTestdata(t, tc.file), tc.file
			}
			pods, err := DecodeManifest(data, source)
			if err == nil {
				t.Fatalf("DecodeManifest = %d pods, nil error; want an error", len(pods))
			}
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error %T %v is not a *ManifestError", err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, source) {
				t.Errorf("error %q does not name the source %q", msg, source)
			}
			if tc.wantField != "" && !me.HasField(tc.wantField) {
				t.Errorf("error %q does not name field %q (fields %+v)", msg, tc.wantField, me.Fields)
			}
			if !strings.Contains(msg, tc.wantText) {
				t.Errorf("error %q does not contain %q", msg, tc.wantText)
			}
		})
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                        v1.PullAlways,
		"busybox:latest":                 v1.PullAlways,
		"busybox:1.36":                   v1.PullIfNotPresent,
		"localhost:5000/busybox":         v1.PullAlways,
		"localhost:5000/busybox:v1":      v1.PullIfNotPresent,
		"busybox@sha256:abcd":            v1.PullIfNotPresent,
		"busybox:latest@sha256:abcd":     v1.PullAlways,
		"registry.k8s.io/pause:3.10":     v1.PullIfNotPresent,
		"registry.k8s.io/a/b/pause":      v1.PullAlways,
		"registry.k8s.io:443/pause:3.10": v1.PullIfNotPresent,
	} {
		if got := defaultPullPolicy(image); got != want {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func TestMakeStatic(t *testing.T) {
	decode := func() *v1.Pod {
		pods, err := DecodeManifest(readTestdata(t, "web.yaml"), "web.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return pods[0]
	}
	opts := staticPodOptions{nodeName: "Node-A", source: "file", location: "/etc/m/web.yaml", tolerateNoExecute: true}
	pod := decode()
	if err := makeStatic(pod, opts); err != nil {
		t.Fatal(err)
	}
	if pod.Name != "web-node-a" || pod.Namespace != "default" || pod.Spec.NodeName != "Node-A" {
		t.Errorf("name, namespace, nodeName = %s, %s, %s; want web-node-a, default, Node-A", pod.Name, pod.Namespace, pod.Spec.NodeName)
	}
	if pod.UID == "" || pod.Annotations[ConfigHashAnnotation] != string(pod.UID) {
		t.Errorf("UID %q, hash annotation %q: want equal and set", pod.UID, pod.Annotations[ConfigHashAnnotation])
	}
	if pod.Annotations[ConfigSourceAnnotation] != "file" || pod.Status.Phase != v1.PodPending {
		t.Errorf("source annotation %q, phase %q; want file, Pending", pod.Annotations[ConfigSourceAnnotation], pod.Status.Phase)
	}
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0] != want {
		t.Errorf("tolerations = %+v, want only %+v", pod.Spec.Tolerations, want)
	}

	// Deterministic, and sensitive to content, node and location.
	uid := func(change func(*v1.Pod, *staticPodOptions)) string {
		p, o := decode(), opts
		change(p, &o)
		if err := makeStatic(p, o); err != nil {
			t.Fatal(err)
		}
		return string(p.UID)
	}
	same := uid(func(*v1.Pod, *staticPodOptions) {})
	if same != string(pod.UID) {
		t.Errorf("UID not deterministic: %s then %s", pod.UID, same)
	}
	for name, change := range map[string]func(*v1.Pod, *staticPodOptions){
		"image":    func(p *v1.Pod, _ *staticPodOptions) { p.Spec.Containers[0].Image = "nginx:1.28" },
		"label":    func(p *v1.Pod, _ *staticPodOptions) { p.Labels["x"] = "y" },
		"node":     func(_ *v1.Pod, o *staticPodOptions) { o.nodeName = "node-b" },
		"location": func(_ *v1.Pod, o *staticPodOptions) { o.location = "/etc/m/other.yaml" },
		"source":   func(_ *v1.Pod, o *staticPodOptions) { o.source = "http" },
	} {
		if got := uid(change); got == same {
			t.Errorf("changing the %s kept UID %s", name, got)
		}
	}

	// An explicit UID is kept; an existing toleration is not repeated; HTTP
	// pods get no toleration.
	p := decode()
	p.UID = "given"
	p.Spec.Tolerations = []v1.Toleration{want}
	if err := makeStatic(p, opts); err != nil {
		t.Fatal(err)
	}
	if p.UID != "given" || len(p.Spec.Tolerations) != 1 {
		t.Errorf("explicit UID %q, tolerations %d; want given, 1", p.UID, len(p.Spec.Tolerations))
	}
	p = decode()
	if err := makeStatic(p, staticPodOptions{nodeName: "n", source: "http", location: "http://x"}); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.Tolerations) != 0 {
		t.Errorf("http pod tolerations = %+v, want none", p.Spec.Tolerations)
	}

	// The suffixed name must still be valid.
	p = decode()
	p.Name = strings.Repeat("a", 250)
	var me *ManifestError
	if err := makeStatic(p, opts); !errors.As(err, &me) || !me.HasField("metadata.name") {
		t.Errorf("makeStatic with a 250-char name: %v, want a metadata.name error", err)
	}
}

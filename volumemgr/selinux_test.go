package volumemgr_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/internal/selinux"
	"github.com/nodekit/nodekit/internal/selinux/selinuxtest"
	"github.com/nodekit/nodekit/volumemgr"
)

// TestSELinuxRelabel: which volumes' mounts ask the runtime to relabel, as
// upstream's volume attributes (Managed and SELinuxRelabel): emptyDir,
// configMap, secret, downwardAPI and projected do, hostPath does not. The
// flag does not depend on the host: the runtime sends it to CRI only where
// SELinux is enabled (criruntime), as upstream's kuberuntime.
func TestSELinuxRelabel(t *testing.T) {
	for _, tc := range []struct {
		name string
		host func(testing.TB) selinuxtest.Host // nil: the real detector
	}{{"enabled", selinuxtest.Enabled}, {"this host", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			var host volumemgr.SELinux
			if tc.host != nil {
				host = tc.host(t)
			}
			f := newFixture(t, func(c *volumemgr.Config) { c.SELinux = host })
			f.objs.SetConfigMap(configMap("cm", map[string]string{"k": "v"}))
			f.objs.SetSecret(secret("s", map[string]string{"k": "v"}))
			pod := testPod("web",
				v1.Volume{Name: "empty", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				v1.Volume{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
				v1.Volume{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
				v1.Volume{Name: "downward", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
					{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
				v1.Volume{Name: "projected", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}}}},
				v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: t.TempDir()}}},
			)
			pod.Spec.SecurityContext = &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Level: "s0:c1,c2"}}
			f.mount(pod)
			ms, err := f.m.ContainerMounts(f.ctx, pod, &pod.Spec.Containers[0])
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{"empty": true, "cm": true, "secret": true, "downward": true, "projected": true, "host": false}
			for _, m := range ms {
				if m.SELinuxRelabel != want[m.Name] {
					t.Errorf("volume %s: SELinuxRelabel = %v, want %v", m.Name, m.SELinuxRelabel, want[m.Name])
				}
			}
			if len(ms) != len(want) {
				t.Errorf("mounts = %+v", ms)
			}
		})
	}
}

// labelPlugin records the SELinuxLabel of each SetUp, for any volume.
type labelPlugin struct {
	mu     sync.Mutex
	labels map[string]string
}

func (*labelPlugin) Name() string               { return "example.com/label" }
func (*labelPlugin) CanSupport(*v1.Volume) bool { return true }
func (p *labelPlugin) SetUp(_ context.Context, req *volumemgr.SetUpRequest) (*volumemgr.SetUpResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.labels[req.Volume.Name] = req.SELinuxLabel
	return &volumemgr.SetUpResult{Path: req.Dir}, nil
}
func (*labelPlugin) TearDown(context.Context, *volumemgr.TearDownRequest) error { return nil }

// TestSELinuxLabel: the label a volume is set up with is that of the
// containers that mount it (theirs, else the pod's), as upstream's
// desired state: none without SELinux or with seLinuxChangePolicy
// Recursive; differing labels fail a PV-backed volume before set-up with
// upstream's message, and leave any other volume without a label. The
// enabled host is the Fake, or the real one with $NODEKIT_SELINUX=host;
// the real detector ("this host") finds SELinux only on an SELinux host.
func TestSELinuxLabel(t *testing.T) {
	const a, b = "system_u:object_r:container_file_t:s0:c1,c2", "system_u:object_r:container_file_t:s0:c3,c4"
	const multiple = "failed to process volumes=[vol]: multiple SELinux labels found: " + a + "," + b
	claim := v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}
	empty := v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}
	enabled := selinuxtest.Enabled
	disabled := func(testing.TB) selinuxtest.Host { return selinux.Fake{Disabled: true} }
	thisHost := ""
	if (selinux.Host{}).Enabled() {
		thisHost = multiple
	}
	for _, tc := range []struct {
		name   string
		host   func(testing.TB) selinuxtest.Host // nil: the real detector
		src    v1.VolumeSource
		second string // the second container's level; "" none
		policy v1.PodSELinuxChangePolicy
		want   string
		err    string
	}{
		{name: "pod label", host: enabled, src: claim, want: a},
		{name: "same label twice", host: enabled, src: claim, second: "s0:c1,c2", want: a},
		{name: "container label differs, claim", host: enabled, src: claim, second: "s0:c3,c4", err: multiple},
		{name: "container label differs, emptyDir", host: enabled, src: empty, second: "s0:c3,c4"},
		{name: "Recursive", host: enabled, src: claim, policy: v1.SELinuxChangePolicyRecursive},
		{name: "MountOption", host: enabled, src: claim, policy: v1.SELinuxChangePolicyMountOption, want: a},
		{name: "disabled", host: disabled, src: claim, second: "s0:c3,c4"},
		{name: "this host", src: claim, second: "s0:c3,c4", err: thisHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &labelPlugin{labels: map[string]string{}}
			var host volumemgr.SELinux
			if tc.host != nil {
				host = tc.host(t)
			}
			f := newFixture(t, func(c *volumemgr.Config) { c.SELinux, c.Plugins = host, []volumemgr.Plugin{p} })
			pod := testPod("web", v1.Volume{Name: "vol", VolumeSource: tc.src})
			pod.Spec.SecurityContext = &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Level: "s0:c1,c2"}}
			if tc.policy != "" {
				pod.Spec.SecurityContext.SELinuxChangePolicy = ptr.To(tc.policy)
			}
			if tc.second != "" {
				pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "second",
					VolumeMounts:    []v1.VolumeMount{{Name: "vol", MountPath: "/vol"}},
					SecurityContext: &v1.SecurityContext{SELinuxOptions: &v1.SELinuxOptions{Level: tc.second}}})
			}
			if tc.err != "" {
				f.m.AddPod(pod)
				f.reconcile()
				err := f.m.WaitForAttachAndMount(f.ctx, pod)
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("WaitForAttachAndMount = %v, want %q", err, tc.err)
				}
				if _, ok := p.labels["vol"]; ok {
					t.Errorf("volume set up despite the error")
				}
				return
			}
			f.mount(pod)
			if got, ok := p.labels["vol"]; !ok || got != tc.want {
				t.Errorf("SELinuxLabel = %q (set up %v), want %q", got, ok, tc.want)
			}
		})
	}
}

// randomLevels is an SELinux host that translates options without a
// level to new categories at each call, as a real host does (go-selinux
// reserves a random pair; TestHostFileLabel in internal/selinux).
type randomLevels struct {
	mu sync.Mutex
	n  int
}

func (*randomLevels) Enabled() bool                       { return true }
func (*randomLevels) SupportsLabels(string) (bool, error) { return true, nil }
func (r *randomLevels) FileLabel(opts *v1.SELinuxOptions) (string, error) {
	l, err := selinux.Fake{}.FileLabel(opts)
	if err != nil || opts.Level != "" {
		return l, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return fmt.Sprintf("system_u:object_r:container_file_t:s0:c%d,c%d", r.n, r.n+100), nil
}

// refreshPlugin is labelPlugin whose volumes are set up again (refreshed)
// when the pod changes, recording the label of every SetUp in order.
type refreshPlugin struct {
	mu     sync.Mutex
	labels []string
}

func (*refreshPlugin) Name() string               { return "example.com/refresh" }
func (*refreshPlugin) CanSupport(*v1.Volume) bool { return true }
func (p *refreshPlugin) SetUp(_ context.Context, req *volumemgr.SetUpRequest) (*volumemgr.SetUpResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.labels = append(p.labels, req.SELinuxLabel)
	return &volumemgr.SetUpResult{Path: req.Dir, Refresh: true}, nil
}
func (*refreshPlugin) TearDown(context.Context, *volumemgr.TearDownRequest) error { return nil }

// TestSELinuxLabelStable: a volume keeps the label it was first set up
// with for the pod while the pod stays, as upstream fixes it when the
// volume enters the desired state, though the pod's options have no level
// and so translate to new categories at each call on a real host: a
// refresh after the pod changed gets the same label.
func TestSELinuxLabelStable(t *testing.T) {
	for _, tc := range []struct {
		name string
		host func(testing.TB) selinuxtest.Host
	}{
		{"random levels", func(testing.TB) selinuxtest.Host { return &randomLevels{} }},
		{"enabled", selinuxtest.Enabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &refreshPlugin{}
			host := tc.host(t)
			f := newFixture(t, func(c *volumemgr.Config) { c.SELinux, c.Plugins = host, []volumemgr.Plugin{p} })
			pod := testPod("web", v1.Volume{Name: "vol", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}})
			pod.Spec.SecurityContext = &v1.PodSecurityContext{SELinuxOptions: &v1.SELinuxOptions{Type: "container_t"}}
			f.mount(pod)
			changed := pod.DeepCopy()
			changed.Labels = map[string]string{"changed": "yes"}
			f.m.AddPod(changed)
			f.reconcile()
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.labels) != 2 || p.labels[0] == "" || p.labels[1] != p.labels[0] {
				t.Errorf("labels of the set-up and the refresh: %q, want one label twice", p.labels)
			}
		})
	}
}

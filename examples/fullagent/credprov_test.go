package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/kubeletconfig"
)

// TestCredentialProviderFlags: the two flags are kubelet's, both or
// neither, and a bad setup stops the agent naming what is wrong.
func TestCredentialProviderFlags(t *testing.T) {
	dir := t.TempDir()
	gates, err := kubeletconfig.NewGates(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" is no providers and no error
	}{
		{"neither", nil, ""},
		{"config alone", []string{"--image-credential-provider-config=" + filepath.Join(dir, "c.yaml")}, "plugin binary directory  did not exist"},
		{"bin dir alone", []string{"--image-credential-provider-bin-dir=" + dir}, "credential provider config path is empty"},
		{"absent config", []string{"--image-credential-provider-bin-dir=" + dir, "--image-credential-provider-config=" + filepath.Join(dir, "c.yaml")}, "unable to access path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.checkRefusedFlags(); err != nil {
				t.Fatalf("the flags are refused: %v", err)
			}
			creds, err := credentialProviders(o, gates, nil, prometheus.NewRegistry())
			switch {
			case tc.want == "" && (err != nil || creds != nil):
				t.Fatalf("credentialProviders = %v, %v; want nil, nil", creds, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--image-credential-provider-config")):
				t.Fatalf("credentialProviders error %v, want %q naming the flags", err, tc.want)
			}
		})
	}
}

// wrongRegistry is a registry name whose credential provider answers
// with a wrong password; saRegistry's provider wants a service-account
// token.
const (
	wrongRegistry = "wrong.nodekit.test"
	saRegistry    = "sa.nodekit.test"
)

// TestImagePullsCredentialProvider pulls private images through a
// credential provider plugin (agenttest/credprovtest), as a node on ECR or
// Artifact Registry does: pods without imagePullSecrets get the
// registry's credentials from the plugin, which is run once per cache key
// (cacheKeyType Registry), a plugin giving a wrong password makes the
// pull fail with ErrImagePull and the registry's refusal, as upstream, and
// a provider with tokenAttributes gets the pod's service-account token.
func TestImagePullsCredentialProvider(t *testing.T) {
	private := agenttest.StartRegistry(t, agenttest.WithRegistryUsers(map[string]string{"alice": "s3cret"}))
	one, two, wrong, saImage := privateRegistry+"/team/busybox:1.0", privateRegistry+"/team/other:2.0", wrongRegistry+"/team/busybox:1.0", saRegistry+"/team/busybox:1.0"
	for _, ref := range []string{one, two, wrong, saImage} {
		private.Push(agenttest.BusyboxImage, ref)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	good := agenttest.BuildCredentialProvider(t, bin, "good-provider")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bad-provider", "sa-provider", "failing-provider"} {
		if err := os.WriteFile(filepath.Join(bin, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	goodLog, badLog, saLog := filepath.Join(dir, "good.log"), filepath.Join(dir, "bad.log"), filepath.Join(dir, "sa.log")
	provider := func(name, match, password, log string, args ...string) string {
		args = append([]string{`"-cache-key-type=Registry"`}, args...)
		return "- name: " + name + "\n  matchImages: [\"" + match + "\"]\n  defaultCacheDuration: 10m\n" +
			"  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  args: [" + strings.Join(args, ", ") + "]\n  env:\n" +
			"  - {name: CREDPROVTEST_USERNAME, value: alice}\n  - {name: CREDPROVTEST_PASSWORD, value: " + password + "}\n" +
			"  - {name: CREDPROVTEST_LOG, value: " + log + "}\n"
	}
	config := filepath.Join(dir, "credential-providers.yaml")
	writeFile(t, config, "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"+
		provider("good-provider", privateRegistry, "s3cret", goodLog)+provider("bad-provider", wrongRegistry, "wrong", badLog)+
		provider("failing-provider", wrongRegistry, "unused", filepath.Join(dir, "failing.log"), `"-fail=no credentials today"`)+
		provider("sa-provider", saRegistry, "s3cret", saLog)+"  tokenAttributes:\n    serviceAccountTokenAudience: "+saRegistry+
		"\n    requireServiceAccount: true\n    cacheType: ServiceAccount\n")
	// Image GC removes an image unused for 20s, and looks every 2s
	// (dead containers go every 2s), for the records' part at the end.
	e := startEnv(t, envOption{
		config: "imageMinimumGCAge: 1s\nimageMaximumGCAge: 20s\n",
		cri:    []agenttest.ContainerdOption{agenttest.WithRegistryMirror(private, privateRegistry, wrongRegistry, saRegistry)},
		flags: func(o *options) {
			o.credProviderConfig, o.credProviderBinDir = config, bin
			o.imageGCPeriod, o.containerGCPeriod = 2*time.Second, 2*time.Second
		},
	})
	t.Cleanup(func() {
		if t.Failed() {
			e.logEvents(t)
		}
	})
	calls := func(log string) []string {
		b, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
	}

	for _, tc := range []struct{ pod, image string }{{"credprov-one", one}, {"credprov-two", two}} {
		p := simplePod(tc.pod, v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Image = tc.image
		e.createPod(t, p)
		e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.waitEvent(t, p.Name, "Pulled", `Successfully pulled image "`+tc.image+`"`)
	}
	// The plugin was asked about the first image's repository only: its
	// Registry answer served the second image of the same registry.
	if got := calls(goodLog); len(got) != 1 || got[0] != privateRegistry+"/team/busybox" {
		t.Errorf("good provider calls %q, want one for %s/team/busybox", got, privateRegistry)
	}

	p := simplePod("credprov-wrong", v1.RestartPolicyAlways, "sleep 3600")
	p.Spec.Containers[0].Image = wrong
	e.createPod(t, p)
	got := e.waitPod(t, p.Name, 60*time.Second, "ErrImagePull", waitingReason("app", "ErrImagePull"))
	msg := containerStatus(got, "app").State.Waiting.Message
	// One credential tried, so the message is that pull's own error (no
	// aggregate brackets, no anonymous retry), as upstream.
	if strings.HasPrefix(msg, "[") || (!strings.Contains(msg, "401 Unauthorized") && !strings.Contains(msg, "authorization failed")) {
		t.Errorf("ErrImagePull message %q, want the registry's refusal of the plugin's credentials", msg)
	}
	e.waitEvent(t, p.Name, "Failed", `Failed to pull image "`+wrong+`": `+msg)
	if got := calls(badLog); len(got) == 0 || got[0] != wrongRegistry+"/team/busybox" {
		t.Errorf("bad provider calls %q, want %s/team/busybox", got, wrongRegistry)
	}
	if got := calls(goodLog); len(got) != 1 {
		t.Errorf("good provider calls %q after the wrong registry's pull, want still one", got)
	}

	// A provider with tokenAttributes gets a token of the pod's service
	// account, bound to the pod. The node may request that audience only
	// with RBAC's request-serviceaccounts-token-audience, as on a real
	// cluster.
	e.grantTokenAudience(t, saRegistry)
	p = simplePod("credprov-sa", v1.RestartPolicyAlways, "sleep 3600")
	p.Spec.Containers[0].Image = saImage
	e.createPod(t, p)
	e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if got := calls(saLog); len(got) != 1 || !strings.HasPrefix(got[0], saRegistry+"/team/busybox token=ey") {
		t.Errorf("sa provider calls %q, want one with a service-account token (a JWT)", got)
	}

	testProviderMetrics(t, e, config, calls(goodLog), calls(saLog))
	testProviderPullRecords(t, e, private, one, saImage)
}

// testProviderMetrics reads kubelet's plugin metrics from /metrics: one
// duration observation per run of a plugin (as many as the good and the
// token provider's call logs hold), the failing provider's runs counted
// in errors_total (the bad provider exits 0 with its wrong password: no
// plugin error), and the config's hash (kubelet's: SHA-256 of the file's
// length and content) in config_info.
func testProviderMetrics(t *testing.T, e *env, config string, good, sa []string) {
	t.Helper()
	m, err := e.scrape(t.Context(), "metrics")
	if err != nil {
		t.Fatal(err)
	}
	count := func(name, plugin string) float64 {
		return m[name+`{plugin_name="`+plugin+`"}`]
	}
	const duration = "kubelet_credential_provider_plugin_duration_count"
	const errs = "kubelet_credential_provider_plugin_errors_total"
	if got := count(duration, "good-provider"); got != float64(len(good)) {
		t.Errorf("%s{good-provider} = %v, want %d (its runs)", duration, got, len(good))
	}
	if got := count(duration, "sa-provider"); got != float64(len(sa)) {
		t.Errorf("%s{sa-provider} = %v, want %d (its runs)", duration, got, len(sa))
	}
	if got := count(duration, "bad-provider"); got < 1 {
		t.Errorf("%s{bad-provider} = %v, want at least 1", duration, got)
	}
	failed, ran := count(errs, "failing-provider"), count(duration, "failing-provider")
	if failed < 1 || ran < failed {
		t.Errorf("failing-provider: %s = %v, %s = %v; want at least 1 error, each a run", errs, failed, duration, ran)
	}
	t.Logf("plugin runs: good %v, sa %v, bad %v, failing %v (errors %v)", count(duration, "good-provider"), count(duration, "sa-provider"),
		count(duration, "bad-provider"), ran, failed)
	for _, p := range []string{"good-provider", "bad-provider", "sa-provider"} {
		if got := count(errs, p); got != 0 {
			t.Errorf("%s{%s} = %v, want 0", errs, p, got)
		}
	}
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
	h.Write(b)
	info := fmt.Sprintf(`kubelet_credential_provider_config_info{hash="sha256:%x"}`, h.Sum(nil))
	if m[info] != 1 {
		var got []string
		for k := range m {
			if strings.HasPrefix(k, "kubelet_credential_provider_config_info") {
				got = append(got, k)
			}
		}
		t.Errorf("%s absent; config_info series %q", info, got)
	}
}

// testProviderPullRecords: the pull records keep what the plugins' pulls
// were for, as kubelet (KubeletEnsureSecretPulledImages, policy
// NeverVerifyPreloadedImages): a plain provider's credentials are the
// node's, so a second pod uses the image without a registry pull; a
// token provider's are the service account's, so a second pod of the
// same account does too. Once the pods are gone image GC removes the
// image, and its record goes with it.
func testProviderPullRecords(t *testing.T, e *env, private *agenttest.Registry, one, saImage string) {
	imageID := private.ImageID(agenttest.BusyboxImage)
	record := filepath.Join(e.rootDir, "image_manager", "pulled", hashFileName(imageID))
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("no pulled record for %s: %v", imageID, err)
	}
	for _, want := range []string{`"` + privateRegistry + `/team/busybox":{"nodePodsAccessible":true}`,
		`"` + saRegistry + `/team/busybox":{"kubernetesServiceAccounts":[{"uid":"`, `"namespace":"default","name":"default"}]}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("record %s lacks %s", b, want)
		}
	}
	// The pod in ErrImagePull back-off asks the same registry path again
	// and again: it goes first, so that only the pods below are counted.
	if err := e.client.CoreV1().Pods("default").Delete(t.Context(), "credprov-wrong", *metav1.NewDeleteOptions(0)); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := e.client.CoreV1().Pods("default").Get(t.Context(), "credprov-wrong", metav1.GetOptions{}); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a pull already under way ends
	again := func(name, image string) {
		t.Helper()
		before := manifestRequests(t, private, "team/busybox")
		p := simplePod(name, v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Image = image
		e.createPod(t, p)
		e.waitPod(t, name, 90*time.Second, "Running", podRunning)
		e.waitEvent(t, name, "Pulled", `Container image "`+image+`" already present on machine and can be accessed by the pod`)
		if after := manifestRequests(t, private, "team/busybox"); after != before {
			t.Errorf("%s: manifest requests went from %d to %d: the image was pulled again", name, before, after)
		}
	}
	again("credprov-one-again", one)
	again("credprov-sa-again", saImage)
	m, err := e.scrape(t.Context(), "metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := m[`kubelet_imagemanager_image_mustpull_checks_total{result="credentialRecordFound"}`]; got < 2 {
		t.Errorf("kubelet_imagemanager_image_mustpull_checks_total{result=credentialRecordFound} = %v, want at least 2", got)
	}
	if got := m["kubelet_imagemanager_ondisk_pulledrecords"]; got != 1 {
		t.Errorf("kubelet_imagemanager_ondisk_pulledrecords = %v, want 1", got)
	}

	pods, err := e.client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if err := e.client.CoreV1().Pods("default").Delete(t.Context(), p.Name, *metav1.NewDeleteOptions(0)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for e.cri.HasImage(one) {
		if time.Now().After(deadline) {
			t.Fatalf("image GC did not remove %s within 2m of its pods' deletion", one)
		}
		time.Sleep(time.Second)
	}
	// The prune follows the removal in the same pass.
	for {
		_, err := os.Stat(record)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pulled record of the removed image %s is still there: %v", imageID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m, err = e.scrape(t.Context(), "metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := m["kubelet_imagemanager_ondisk_pulledrecords"]; got != 0 {
		t.Errorf("kubelet_imagemanager_ondisk_pulledrecords = %v after the image's removal, want 0", got)
	}
}

// grantTokenAudience lets the test node request service-account tokens
// for audience.
func (e *env) grantTokenAudience(t *testing.T, audience string) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "token-audience-" + audience},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"request-serviceaccounts-token-audience"}, APIGroups: []string{""}, Resources: []string{audience}}}}
	if _, err := e.client.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "system:node:" + testNode}}}
	if _, err := e.client.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

package pullrecords

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

var (
	secretA = kubeletv1beta1.ImagePullSecret{UID: "uid-a", Namespace: "team-a", Name: "regcred", CredentialHash: "hash-a"}
	secretB = kubeletv1beta1.ImagePullSecret{UID: "uid-b", Namespace: "team-b", Name: "regcred", CredentialHash: "hash-b"}
	saA     = kubeletv1beta1.ImagePullServiceAccount{UID: "sa-uid", Namespace: "team-a", Name: "puller"}
)

func newTestVerifier(t *testing.T, root string, policy kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allow ...string) (*Verifier, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	v, err := New(ctx, Config{RootDir: root, Policy: policy, Allowlist: allow,
		Clock: clocktesting.NewFakePassiveClock(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	return v, ctx
}

// podCreds is MustPull's credentials callback for fixed credentials.
func podCreds(secrets []kubeletv1beta1.ImagePullSecret, sa *kubeletv1beta1.ImagePullServiceAccount) func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount) {
	return func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount) { return secrets, sa }
}

func hashName(s string) string { return fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(s))) }

// TestFilesAreKubelets checks the files written around a pull: kubelet's
// names, paths and JSON, the intent gone after the record is written.
func TestFilesAreKubelets(t *testing.T) {
	root := t.TempDir()
	v, ctx := newTestVerifier(t, root, "")
	image := "private.example/team/app:1.0"
	if err := v.RecordIntent(ctx, image); err != nil {
		t.Fatal(err)
	}
	intentPath := filepath.Join(root, "image_manager", "pulling", hashName(image))
	b, err := os.ReadFile(intentPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"private.example/team/app:1.0"}`; string(b) != want {
		t.Errorf("intent file %s, want %s", b, want)
	}
	v.RecordPulled(ctx, image, "sha256:abc", &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretA}})
	if _, err := os.Stat(intentPath); !os.IsNotExist(err) {
		t.Errorf("the intent is still there after the record: %v", err)
	}
	b, err = os.ReadFile(filepath.Join(root, "image_manager", "pulled", hashName("sha256:abc")))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2026-12-02T03:00:00Z","imageRef":"sha256:abc",` +
		`"credentialMapping":{"private.example/team/app":{"kubernetesSecrets":[{"uid":"uid-a","namespace":"team-a","name":"regcred","credentialHash":"hash-a"}]}}}`
	if string(b) != want {
		t.Errorf("record file\n%s\nwant\n%s", b, want)
	}
}

// TestReadsKubeletFiles reads records as kubelet writes them (both
// versions, with kubelet's trailing newline) and ignores broken files.
func TestReadsKubeletFiles(t *testing.T) {
	root := t.TempDir()
	pulled := filepath.Join(root, "image_manager", "pulled")
	if err := os.MkdirAll(pulled, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"ref-secret": `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2025-10-21T12:26:40Z","imageRef":"ref-secret","credentialMapping":{"docker.io/team/app":{"kubernetesSecrets":[{"uid":"uid-a","namespace":"team-a","name":"regcred","credentialHash":"hash-a"}]}}}` + "\n",
		"ref-alpha":  `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2025-10-21T12:26:40Z","imageRef":"ref-alpha","credentialMapping":{"docker.io/team/app":{"nodePodsAccessible":true}}}` + "\n",
		"ref-broken": `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"ref-broken":"credentialMapping"}`,
		"ref-other":  `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"ref-other","unknownField":1}`,
	}
	for ref, content := range files {
		if err := os.WriteFile(filepath.Join(pulled, hashName(ref)), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	v, ctx := newTestVerifier(t, root, kubeletv1beta1.AlwaysVerify)
	image := "docker.io/team/app:2"
	cases := []struct {
		ref     string
		secrets []kubeletv1beta1.ImagePullSecret
		must    bool
	}{
		{"ref-secret", []kubeletv1beta1.ImagePullSecret{secretA}, false},
		{"ref-secret", []kubeletv1beta1.ImagePullSecret{secretB}, true},
		{"ref-alpha", nil, false},
		{"ref-broken", []kubeletv1beta1.ImagePullSecret{secretA}, true},
		{"ref-other", nil, true},
	}
	for _, c := range cases {
		if got := v.MustPull(ctx, image, c.ref, podCreds(c.secrets, nil)); got != c.must {
			t.Errorf("MustPull(%s, %v) = %v, want %v", c.ref, c.secrets, got, c.must)
		}
	}
	// The v1alpha1 record was rewritten in v1beta1 at start.
	b, err := os.ReadFile(filepath.Join(pulled, hashName("ref-alpha")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"apiVersion":"kubelet.config.k8s.io/v1beta1"`) {
		t.Errorf("the v1alpha1 record was not migrated: %s", b)
	}
	// A pull over a broken record replaces it.
	v.RecordPulled(ctx, image, "ref-broken", &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true})
	if v.MustPull(ctx, image, "ref-broken", podCreds(nil, nil)) {
		t.Error("the broken record was not replaced by the pull's")
	}
}

// TestMustPull is the decision table: the policy, what the records say
// and the pod's credentials.
func TestMustPull(t *testing.T) {
	const image = "registry.example/team/app:1.0"
	type setup func(ctx context.Context, v *Verifier)
	pulled := func(creds *kubeletv1beta1.ImagePullCredentials) setup {
		return func(ctx context.Context, v *Verifier) {
			if err := v.RecordIntent(ctx, image); err != nil {
				t.Fatal(err)
			}
			v.RecordPulled(ctx, image, "sha256:img", creds)
		}
	}
	withSecret := pulled(&kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretA}})
	anon := pulled(&kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true})
	withSA := pulled(&kubeletv1beta1.ImagePullCredentials{KubernetesServiceAccounts: []kubeletv1beta1.ImagePullServiceAccount{saA}})
	unknown := pulled(nil)
	intentOnly := func(ctx context.Context, v *Verifier) {
		if err := v.RecordIntent(ctx, image); err != nil {
			t.Fatal(err)
		}
	}
	none := func(context.Context, *Verifier) {}
	sameHashOtherSecret := secretA
	sameHashOtherSecret.Namespace, sameHashOtherSecret.UID = "team-c", "uid-c"
	rotated := secretA
	rotated.CredentialHash = "hash-a2"

	cases := []struct {
		name    string
		policy  kubeletv1beta1.ImagePullCredentialsVerificationPolicy
		allow   []string
		setup   setup
		image   string // default image
		ref     string // default sha256:img
		secrets []kubeletv1beta1.ImagePullSecret
		sa      *kubeletv1beta1.ImagePullServiceAccount
		must    bool
	}{
		{name: "preloaded image, default policy", setup: none, must: false},
		{name: "preloaded image, AlwaysVerify", policy: kubeletv1beta1.AlwaysVerify, setup: none, must: true},
		{name: "absent image", setup: none, ref: "-", must: true},
		{name: "pulled with a secret, no secret", setup: withSecret, must: true},
		{name: "pulled with a secret, NeverVerify", policy: kubeletv1beta1.NeverVerify, setup: withSecret, must: false},
		{name: "pulled with a secret, same secret", setup: withSecret, secrets: []kubeletv1beta1.ImagePullSecret{secretA}, must: false},
		{name: "pulled with a secret, other secret", setup: withSecret, secrets: []kubeletv1beta1.ImagePullSecret{secretB}, must: true},
		{name: "pulled with a secret, other secret with the same credentials", setup: withSecret, secrets: []kubeletv1beta1.ImagePullSecret{sameHashOtherSecret}, must: false},
		{name: "pulled with a secret, same secret with new credentials", setup: withSecret, secrets: []kubeletv1beta1.ImagePullSecret{rotated}, must: false},
		{name: "pulled with a secret, another tag of the image", setup: withSecret, image: "registry.example/team/app:2.0", secrets: []kubeletv1beta1.ImagePullSecret{secretA}, must: false},
		{name: "pulled with a secret, another name for the image", setup: withSecret, image: "mirror.example/team/app:1.0", secrets: []kubeletv1beta1.ImagePullSecret{secretA}, must: true},
		{name: "pulled anonymously", setup: anon, must: false},
		{name: "pulled anonymously, AlwaysVerify", policy: kubeletv1beta1.AlwaysVerify, setup: anon, must: false},
		{name: "pulled with unknown credentials", setup: unknown, secrets: []kubeletv1beta1.ImagePullSecret{secretA}, must: true},
		{name: "pulled for a service account, same account", setup: withSA, sa: &saA, must: false},
		{name: "pulled for a service account, no account", setup: withSA, must: true},
		{name: "pull in progress, no record yet", setup: intentOnly, must: true},
		{name: "allowlisted by name", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"registry.example/team/app"}, setup: withSecret, must: false},
		{name: "allowlisted by prefix", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"registry.example/*"}, setup: withSecret, must: false},
		{name: "not allowlisted, preloaded", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"registry.example/other/*"}, setup: none, must: true},
		{name: "prefix is a whole segment", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"registry.example/te/*"}, setup: withSecret, must: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, ctx := newTestVerifier(t, t.TempDir(), c.policy, c.allow...)
			c.setup(ctx, v)
			img, ref := image, "sha256:img"
			if c.image != "" {
				img = c.image
			}
			if c.ref == "-" {
				ref = ""
			}
			if got := v.MustPull(ctx, img, ref, podCreds(c.secrets, c.sa)); got != c.must {
				t.Errorf("MustPull = %v, want %v", got, c.must)
			}
		})
	}
}

// TestMatchAddsSecret: a secret that matched by its credentials alone is
// added to the record, so it keeps matching after the first secret goes.
func TestMatchAddsSecret(t *testing.T) {
	root := t.TempDir()
	v, ctx := newTestVerifier(t, root, "")
	image := "registry.example/app:1"
	if err := v.RecordIntent(ctx, image); err != nil {
		t.Fatal(err)
	}
	v.RecordPulled(ctx, image, "sha256:img", &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretA}})
	other := secretA
	other.Namespace, other.UID = "team-c", "uid-c"
	if v.MustPull(ctx, image, "sha256:img", podCreds([]kubeletv1beta1.ImagePullSecret{other}, nil)) {
		t.Fatal("same credentials in another secret must match")
	}
	rec, err := v.files.record("sha256:img")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(rec.CredentialMapping["registry.example/app"].KubernetesSecrets)
	if want := `[{"uid":"uid-a","namespace":"team-a","name":"regcred","credentialHash":"hash-a"},{"uid":"uid-c","namespace":"team-c","name":"regcred","credentialHash":"hash-a"}]`; string(got) != want {
		t.Errorf("secrets %s, want %s", got, want)
	}
}

// TestIntentsCounted: the intent file stays while any pull of the image
// is in progress.
func TestIntentsCounted(t *testing.T) {
	root := t.TempDir()
	v, ctx := newTestVerifier(t, root, "")
	image := "registry.example/app:1"
	path := filepath.Join(root, "image_manager", "pulling", hashName(image))
	for range 2 {
		if err := v.RecordIntent(ctx, image); err != nil {
			t.Fatal(err)
		}
	}
	v.RecordFailed(ctx, image)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the intent went with one of two pulls still running: %v", err)
	}
	v.RecordFailed(ctx, image)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the intent stayed after both pulls failed: %v", err)
	}
}

// TestRecover: an intent a previous run left becomes a record without
// credentials for the image the runtime now holds, so no pod gets it
// without showing credentials; an intent for an absent image stays.
func TestRecover(t *testing.T) {
	root := t.TempDir()
	v, ctx := newTestVerifier(t, root, "")
	for _, img := range []string{"registry.example/app:1", "registry.example/gone:1"} {
		if err := v.RecordIntent(ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	// The agent stops here; the next one starts over the same root.
	v2, ctx := newTestVerifier(t, root, "")
	if !v2.MustPull(ctx, "registry.example/app:1", "sha256:img", podCreds(nil, nil)) {
		t.Error("an image with an intent left over counts as pulled by the agent: a pod without credentials must pull")
	}
	v2.Recover(ctx, []*runtimeapi.Image{{Id: "sha256:img", RepoTags: []string{"registry.example/app:1"}}})
	rec, err := v2.files.record("sha256:img")
	if err != nil || rec == nil {
		t.Fatalf("no record after Recover: %v", err)
	}
	if len(rec.CredentialMapping) != 0 {
		t.Errorf("a recovered record has credentials: %v", rec.CredentialMapping)
	}
	if ok, _ := v2.files.intentExists("registry.example/app:1"); ok {
		t.Error("the recovered intent is still there")
	}
	if ok, _ := v2.files.intentExists("registry.example/gone:1"); !ok {
		t.Error("the intent of an absent image was removed")
	}
	if !v2.MustPull(ctx, "registry.example/app:1", "sha256:img", podCreds([]kubeletv1beta1.ImagePullSecret{secretA}, nil)) {
		t.Error("a recovered record must not open the image to any secret")
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		policy kubeletv1beta1.ImagePullCredentialsVerificationPolicy
		allow  []string
		want   string
	}{
		{"Sometimes", nil, `imagePullCredentialsVerificationPolicy: unknown policy "Sometimes"`},
		{kubeletv1beta1.AlwaysVerify, []string{"a.io/b"}, "preloadedImagesVerificationAllowlist: only allowed with"},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{" a.io/b"}, "preloadedImagesVerificationAllowlist[0]: leading/trailing spaces"},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"a.io/b", "a.io/b:1"}, "preloadedImagesVerificationAllowlist[1]: neither tag nor digest"},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"a.io/*/c"}, "only patterns ending with '/*'"},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"/*"}, "at least registry hostname is required"},
		{kubeletv1beta1.NeverVerifyAllowlistedImages, []string{"A..b"}, "failed to parse as an image name"},
	}
	for _, c := range cases {
		_, err := New(t.Context(), Config{RootDir: t.TempDir(), Policy: c.policy, Allowlist: c.allow})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %q) = %v, want an error with %q", c.policy, c.allow, err, c.want)
		}
	}
	if _, err := New(t.Context(), Config{}); err == nil {
		t.Error("New without RootDir succeeded")
	}
}

func TestTrimTagDigest(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":               "busybox",
		"busybox:1.37":          "busybox",
		"localhost:5000/a/b:v1": "localhost:5000/a/b",
		"a.io/b@sha256:" + strings.Repeat("f", 64):         "a.io/b",
		"a.io/b:t@sha256:" + strings.Repeat("0", 64):       "a.io/b",
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-2": "registry.k8s.io/e2e-test-images/busybox",
	} {
		if got, err := trimTagDigest(in); err != nil || got != want {
			t.Errorf("trimTagDigest(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	if _, err := trimTagDigest("Bad//name"); err == nil {
		t.Error("trimTagDigest accepted an invalid name")
	}
}

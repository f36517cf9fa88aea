package criruntime

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodekit/nodekit"
)

// authImages is a fake image service that records the credentials of
// each pull and lets only the password "good" (or an anonymous pull, with
// anonymous set) through.
type authImages struct {
	*critest.FakeImageService
	anonymous bool

	mu    sync.Mutex
	tries []string // the username of each pull, "-" for none
}

func (a *authImages) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	user := "-"
	if auth != nil {
		user = auth.Username
	}
	a.tries = append(a.tries, user)
	if (auth == nil && a.anonymous) || (auth != nil && auth.Password == "good") {
		return a.FakeImageService.PullImage(ctx, spec, auth, sb)
	}
	return "", errors.New("401 Unauthorized as " + user)
}

// fakeLookup is a CredentialLookup answering with fixed credentials and
// recording what it was asked.
type fakeLookup struct {
	creds []*runtimeapi.AuthConfig
	asked []string
	pods  []string
}

var _ CredentialLookup = (*fakeLookup)(nil)

func (f *fakeLookup) Lookup(_ context.Context, image string, pod *v1.Pod) []*runtimeapi.AuthConfig {
	f.asked = append(f.asked, image)
	f.pods = append(f.pods, pod.Name)
	return f.creds
}

func TestPullCredentials(t *testing.T) {
	withPassword := func(pw string) []v1.Secret {
		cfg := `{"auths":{"private.example.com":{"username":"secret","password":"` + pw + `"}}}`
		return []v1.Secret{{Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(cfg)}}}
	}
	tests := []struct {
		name      string
		secrets   []v1.Secret
		provider  []*runtimeapi.AuthConfig
		anonymous bool
		wantTries []string
		wantErr   string
	}{
		{name: "anonymous without credentials", anonymous: true, wantTries: []string{"-"}},
		{name: "the secret first, then the provider", secrets: withPassword("bad"),
			provider: []*runtimeapi.AuthConfig{{Username: "plugin", Password: "good"}}, wantTries: []string{"secret", "plugin"}},
		{name: "the provider alone", provider: []*runtimeapi.AuthConfig{{Username: "plugin", Password: "good"}}, wantTries: []string{"plugin"}},
		{name: "wrong provider credentials: no anonymous try, the one error's message", anonymous: true,
			provider: []*runtimeapi.AuthConfig{{Username: "plugin", Password: "bad"}}, wantTries: []string{"plugin"}, wantErr: "401 Unauthorized as plugin"},
		{name: "two failures aggregate", secrets: withPassword("bad"), provider: []*runtimeapi.AuthConfig{{Username: "plugin", Password: "bad"}},
			wantTries: []string{"secret", "plugin"}, wantErr: "[401 Unauthorized as secret, 401 Unauthorized as plugin]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := &authImages{FakeImageService: critest.NewFakeImageService(), anonymous: tc.anonymous}
			lookup := &fakeLookup{creds: tc.provider}
			r, err := NewFromServices(t.Context(), critest.NewFakeRuntimeService(), is, Config{Endpoint: "fake", PodLogsDir: t.TempDir(), Credentials: lookup})
			if err != nil {
				t.Fatal(err)
			}
			pod := testPod(v1.Container{Name: "c", Image: "private.example.com/team/app:1.0", ImagePullPolicy: v1.PullAlways})
			pod.ObjectMeta = metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"}
			_, err = r.ensureImage(t.Context(), pod, &pod.Spec.Containers[0], tc.secrets, nil)
			if !reflect.DeepEqual(is.tries, tc.wantTries) {
				t.Errorf("pulls as %v, want %v", is.tries, tc.wantTries)
			}
			if !reflect.DeepEqual(lookup.asked, []string{"private.example.com/team/app"}) || lookup.pods[0] != "p" {
				t.Errorf("provider asked %v for %v, want the repository once for pod p", lookup.asked, lookup.pods)
			}
			var ae *nodekit.ActionError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("pull failed: %v", err)
			case tc.wantErr != "" && (!errors.As(err, &ae) || ae.Reason != nodekit.ErrImagePull || ae.Message != tc.wantErr):
				t.Fatalf("error %#v, want ErrImagePull %q", err, tc.wantErr)
			}
		})
	}
}

func TestRepositoryOf(t *testing.T) {
	for in, want := range map[string]string{
		"busybox:latest":                          "docker.io/library/busybox",
		"team/app:1":                              "docker.io/team/app",
		"docker.io/busybox:1":                     "docker.io/library/busybox",
		"index.docker.io/team/app:1":              "docker.io/team/app",
		"private.example.com/team/app:1.0":        "private.example.com/team/app",
		"localhost:5000/app:latest":               "localhost:5000/app",
		"localhost/app:latest":                    "localhost/app",
		"registry.k8s.io/pause@sha256:0123456789": "registry.k8s.io/pause",
		"reg.io:5000/a/b:t@sha256:0123456789":     "reg.io:5000/a/b",
	} {
		if got := repositoryOf(in); got != want {
			t.Errorf("repositoryOf(%q) = %q, want %q", in, got, want)
		}
	}
}

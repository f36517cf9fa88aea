package criruntime

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
)

// fakeRecords is a PullRecords that answers MustPull with must and logs
// every call.
type fakeRecords struct {
	must  bool
	calls []string
}

var _ PullRecords = (*fakeRecords)(nil)

func (f *fakeRecords) MustPull(_ context.Context, image, imageRef string, creds func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount)) bool {
	secrets, sa := creds()
	call := fmt.Sprintf("MustPull %s %s %v", image, imageRef, secrets)
	if sa != nil {
		call += fmt.Sprintf(" %+v", *sa)
	}
	f.calls = append(f.calls, call)
	return f.must
}

// fakeAccountLookup is a CredentialLookup with AccountLookup: fixed
// credentials, each with its service account.
type fakeAccountLookup struct {
	fakeLookup
	accounts []*kubeletv1beta1.ImagePullServiceAccount
}

var _ AccountLookup = (*fakeAccountLookup)(nil)

func (f *fakeAccountLookup) LookupWithAccounts(ctx context.Context, image string, pod *v1.Pod) ([]*runtimeapi.AuthConfig, []*kubeletv1beta1.ImagePullServiceAccount) {
	return f.Lookup(ctx, image, pod), f.accounts
}

func (f *fakeRecords) RecordIntent(_ context.Context, image string) error {
	f.calls = append(f.calls, "RecordIntent "+image)
	return nil
}

func (f *fakeRecords) RecordPulled(_ context.Context, image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials) {
	s := "<nil>"
	if creds != nil {
		s = fmt.Sprintf("%+v", *creds)
	}
	f.calls = append(f.calls, fmt.Sprintf("RecordPulled %s %s %s", image, imageRef, s))
}

func (f *fakeRecords) RecordFailed(_ context.Context, image string) {
	f.calls = append(f.calls, "RecordFailed "+image)
}

// aliceHash is upstream's credential hash of alice:s3cret: the SHA-256 of
// {"username":"alice","password":"s3cret"}.
const aliceHash = "84e602bef66066d26999b4f32a2afb963a80f8384d3cdf9145038d3c3da62d2b"

func TestVerifiedPulls(t *testing.T) {
	const image = "private.example.com/team/app:1.0"
	secret := v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "team-a", UID: "sec-uid"},
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"private.example.com":{"username":"alice","password":"s3cret"}}}`)}}
	saBuilder := kubeletv1beta1.ImagePullServiceAccount{UID: "sa-uid", Namespace: "team-a", Name: "builder"}
	coords := fmt.Sprintf("%v", []kubeletv1beta1.ImagePullSecret{{UID: "sec-uid", Namespace: "team-a", Name: "regcred", CredentialHash: aliceHash}})
	tests := []struct {
		name      string
		present   bool
		must      bool
		policy    v1.PullPolicy
		secrets   []v1.Secret
		plugin    bool
		accounts  []*kubeletv1beta1.ImagePullServiceAccount // with plugin: an AccountLookup
		pullFails bool
		wantCalls []string
		wantPulls int
		wantErr   nodekit.Reason
		wantEvent string
	}{
		{name: "present, records allow", present: true, policy: v1.PullIfNotPresent, secrets: []v1.Secret{secret},
			wantCalls: []string{"MustPull " + image + " " + image + " " + coords},
			wantEvent: `Normal Pulled Container image "` + image + `" already present on machine and can be accessed by the pod`},
		{name: "present, records refuse: pull with the pod's secret", present: true, must: true, policy: v1.PullIfNotPresent, secrets: []v1.Secret{secret},
			wantCalls: []string{"MustPull " + image + " " + image + " " + coords, "RecordIntent " + image,
				"RecordPulled " + image + " " + image + " {KubernetesSecrets:[{UID:sec-uid Namespace:team-a Name:regcred CredentialHash:" + aliceHash + "}] KubernetesServiceAccounts:[] NodePodsAccessible:false}"},
			wantPulls: 1, wantEvent: `Normal Pulling Pulling image "` + image + `"`},
		{name: "present, records refuse, Never", present: true, must: true, policy: v1.PullNever,
			wantCalls: []string{"MustPull " + image + " " + image + " []"}, wantErr: nodekit.ErrImageNeverPull,
			wantEvent: `Warning ErrImageNeverPull Container image "` + image + `" is not present with pull policy of Never`},
		{name: "absent: anonymous pull recorded for every pod", policy: v1.PullIfNotPresent,
			wantCalls: []string{"RecordIntent " + image, "RecordPulled " + image + " " + image + " {KubernetesSecrets:[] KubernetesServiceAccounts:[] NodePodsAccessible:true}"},
			wantPulls: 1},
		{name: "Always: no question, the pull recorded", present: true, policy: v1.PullAlways, secrets: []v1.Secret{secret},
			wantCalls: []string{"RecordIntent " + image, "RecordPulled " + image + " " + image + " {KubernetesSecrets:[{UID:sec-uid Namespace:team-a Name:regcred CredentialHash:" + aliceHash + "}] KubernetesServiceAccounts:[] NodePodsAccessible:false}"},
			wantPulls: 1},
		{name: "an untracked plugin's credentials are recorded as unknown", policy: v1.PullIfNotPresent, plugin: true,
			wantCalls: []string{"RecordIntent " + image, "RecordPulled " + image + " " + image + " <nil>"}, wantPulls: 1},
		{name: "a plugin's node-wide credentials are recorded for every pod", policy: v1.PullIfNotPresent, plugin: true,
			accounts:  []*kubeletv1beta1.ImagePullServiceAccount{nil},
			wantCalls: []string{"RecordIntent " + image, "RecordPulled " + image + " " + image + " {KubernetesSecrets:[] KubernetesServiceAccounts:[] NodePodsAccessible:true}"}, wantPulls: 1},
		{name: "a plugin's credentials for a service account are recorded for it", policy: v1.PullIfNotPresent, plugin: true,
			accounts:  []*kubeletv1beta1.ImagePullServiceAccount{&saBuilder},
			wantCalls: []string{"RecordIntent " + image, "RecordPulled " + image + " " + image + " {KubernetesSecrets:[] KubernetesServiceAccounts:[{UID:sa-uid Namespace:team-a Name:builder}] NodePodsAccessible:false}"}, wantPulls: 1},
		{name: "present: the plugin's service account is matched", present: true, policy: v1.PullIfNotPresent, plugin: true,
			accounts:  []*kubeletv1beta1.ImagePullServiceAccount{&saBuilder},
			wantCalls: []string{"MustPull " + image + " " + image + " [] {UID:sa-uid Namespace:team-a Name:builder}"}},
		{name: "a failed pull ends the intent", policy: v1.PullIfNotPresent, pullFails: true,
			wantCalls: []string{"RecordIntent " + image, "RecordFailed " + image}, wantPulls: 0, wantErr: nodekit.ErrImagePull},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			is := critest.NewFakeImageService()
			if tc.present {
				is.SetFakeImages([]string{image})
			}
			if tc.pullFails {
				is.InjectError("PullImage", errors.New("registry down"))
			}
			rec := &fakeRecords{must: tc.must}
			ev := &eventLog{}
			cfg := Config{Endpoint: "fake", PodLogsDir: t.TempDir(), PullRecords: rec, Events: ev}
			plugin := fakeLookup{creds: []*runtimeapi.AuthConfig{{Username: "plugin", Password: "x"}}}
			switch {
			case tc.plugin && tc.accounts != nil:
				cfg.Credentials = &fakeAccountLookup{fakeLookup: plugin, accounts: tc.accounts}
			case tc.plugin:
				cfg.Credentials = &plugin
			}
			r, err := NewFromServices(t.Context(), critest.NewFakeRuntimeService(), is, cfg)
			if err != nil {
				t.Fatal(err)
			}
			pod := testPod(v1.Container{Name: "c", Image: image, ImagePullPolicy: tc.policy})
			pod.ObjectMeta = metav1.ObjectMeta{Name: "p", Namespace: "team-a", UID: "u"}
			_, err = r.ensureImage(t.Context(), pod, &pod.Spec.Containers[0], tc.secrets, nil)
			var ae *nodekit.ActionError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ensureImage: %v", err)
			case tc.wantErr != "" && (!errors.As(err, &ae) || ae.Reason != tc.wantErr):
				t.Fatalf("error %v, want %s", err, tc.wantErr)
			}
			if tc.wantErr == nodekit.ErrImageNeverPull && ae.Message != `Container image "`+image+`" is not present with pull policy of Never` {
				t.Errorf("message %q is not upstream's", ae.Message)
			}
			if !reflect.DeepEqual(rec.calls, tc.wantCalls) {
				t.Errorf("records calls\n%q\nwant\n%q", rec.calls, tc.wantCalls)
			}
			pulls := 0
			for _, c := range is.Called {
				if c == "PullImage" {
					pulls++
				}
			}
			if tc.pullFails {
				pulls = 0 // the failed call is counted too
			}
			if pulls != tc.wantPulls {
				t.Errorf("%d pulls, want %d", pulls, tc.wantPulls)
			}
			if tc.wantEvent != "" && !strings.Contains(strings.Join(ev.list(), "\n"), tc.wantEvent) {
				t.Errorf("events %q lack %q", ev.list(), tc.wantEvent)
			}
		})
	}
}

func TestCredentialHashIsUpstreams(t *testing.T) {
	if got := credentialHash("alice", "s3cret", ""); got != aliceHash {
		t.Errorf("credentialHash = %s, want %s", got, aliceHash)
	}
}

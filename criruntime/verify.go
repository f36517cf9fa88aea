package criruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// PullRecords keeps the records of the images the agent pulled and with
// which credentials (KubeletEnsureSecretPulledImages); package
// pullrecords' Verifier satisfies it. image is the image as the pod
// names it, imageRef the runtime's image ID.
type PullRecords interface {
	// MustPull says whether the pod must pull image before it may use
	// the node's copy imageRef. creds gives the pod's credentials for
	// the image (its pull secrets that match the image's registry, and
	// the service account a credential provider gave credentials for);
	// it may run the providers, so MustPull calls it only when it needs
	// them, at most once.
	MustPull(ctx context.Context, image, imageRef string, creds func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount)) bool
	// RecordIntent is called before a pull; an error stops the pull.
	RecordIntent(ctx context.Context, image string) error
	// RecordPulled is called after a successful pull with the
	// credentials that pulled it; nil: unknown, every pod must show its
	// own again.
	RecordPulled(ctx context.Context, image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials)
	// RecordFailed is called after a failed pull.
	RecordFailed(ctx context.Context, image string)
}

// AccountLookup is an optional capability of a CredentialLookup
// (credentialprovider.Keyring has it): each credential with the service
// account it was given for, nil for node-wide credentials. With it an
// image a plugin's credentials pulled is recorded for that account, or
// for every pod of the node, as upstream; without it such a pull is
// recorded with unknown credentials, and every pod must pull again.
type AccountLookup interface {
	LookupWithAccounts(ctx context.Context, image string, pod *v1.Pod) ([]*runtimeapi.AuthConfig, []*kubeletv1beta1.ImagePullServiceAccount)
}

// sourcedAuth is a pull credential and where it came from: a pod's pull
// secret (with upstream's hash of its credentials) or a credential
// provider plugin; of a plugin's, tracked says the lookup told which
// service account it was for (account; nil: node-wide).
type sourcedAuth struct {
	auth    *runtimeapi.AuthConfig
	secret  *v1.Secret
	hash    string
	plugin  bool
	tracked bool
	account *kubeletv1beta1.ImagePullServiceAccount
}

func authConfigs(creds []sourcedAuth) []*runtimeapi.AuthConfig {
	out := make([]*runtimeapi.AuthConfig, 0, len(creds))
	for _, c := range creds {
		out = append(out, c.auth)
	}
	return out
}

// credentialHash is upstream's hash of a pull secret's credentials: the
// SHA-256 of the JSON of its auth config (username, password, email), so
// that records written by kubelet match here and the reverse.
func credentialHash(user, pass, email string) string {
	b, err := json.Marshal(struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
		Email    string `json:"email,omitempty"`
	}{user, pass, email})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// podCredentials are the pull records' view of the pod's credentials:
// its matching secrets, and the first service account a plugin gave
// credentials for (upstream matches one account per pod).
func podCredentials(creds []sourcedAuth) ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount) {
	var out []kubeletv1beta1.ImagePullSecret
	var sa *kubeletv1beta1.ImagePullServiceAccount
	for _, c := range creds {
		switch {
		case c.secret != nil:
			out = append(out, secretCoordinate(c))
		case c.account != nil && sa == nil:
			sa = c.account
		}
	}
	return out, sa
}

func secretCoordinate(c sourcedAuth) kubeletv1beta1.ImagePullSecret {
	return kubeletv1beta1.ImagePullSecret{UID: string(c.secret.UID), Namespace: c.secret.Namespace,
		Name: c.secret.Name, CredentialHash: c.hash}
}

// pulledWith is what the records keep of the credential creds[i] that
// pulled, as upstream: an anonymous pull (i < 0) is open to every pod of
// the node, and so is a plugin's node-wide credential; a secret's is that
// secret's, and a plugin's given for a service account that account's. A
// plugin's credential whose lookup did not say (a CredentialLookup
// without AccountLookup) is kept as unknown (nil): every pod shows
// credentials again, the safe answer.
func pulledWith(creds []sourcedAuth, i int) *kubeletv1beta1.ImagePullCredentials {
	switch {
	case i < 0 || i >= len(creds):
		return &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	case creds[i].secret != nil:
		return &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretCoordinate(creds[i])}}
	case !creds[i].tracked:
		return nil
	case creds[i].account != nil:
		return &kubeletv1beta1.ImagePullCredentials{KubernetesServiceAccounts: []kubeletv1beta1.ImagePullServiceAccount{*creds[i].account}}
	}
	return &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
}

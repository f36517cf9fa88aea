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
	// MustPull says whether the pod with these pull secrets (those
	// matching the image's registry) must pull image before it may use
	// the node's copy imageRef.
	MustPull(ctx context.Context, image, imageRef string, secrets []kubeletv1beta1.ImagePullSecret, sa *kubeletv1beta1.ImagePullServiceAccount) bool
	// RecordIntent is called before a pull; an error stops the pull.
	RecordIntent(ctx context.Context, image string) error
	// RecordPulled is called after a successful pull with the
	// credentials that pulled it; nil: unknown, every pod must show its
	// own again.
	RecordPulled(ctx context.Context, image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials)
	// RecordFailed is called after a failed pull.
	RecordFailed(ctx context.Context, image string)
}

// sourcedAuth is a pull credential and where it came from: a pod's pull
// secret (with upstream's hash of its credentials) or a credential
// provider plugin.
type sourcedAuth struct {
	auth   *runtimeapi.AuthConfig
	secret *v1.Secret
	hash   string
	plugin bool
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

// secretCoordinates are the pull records' view of the pod's matching
// secrets.
func secretCoordinates(creds []sourcedAuth) []kubeletv1beta1.ImagePullSecret {
	var out []kubeletv1beta1.ImagePullSecret
	for _, c := range creds {
		if c.secret != nil {
			out = append(out, secretCoordinate(c))
		}
	}
	return out
}

func secretCoordinate(c sourcedAuth) kubeletv1beta1.ImagePullSecret {
	return kubeletv1beta1.ImagePullSecret{UID: string(c.secret.UID), Namespace: c.secret.Namespace,
		Name: c.secret.Name, CredentialHash: c.hash}
}

// pulledWith is what the records keep of the credential creds[i] that
// pulled: an anonymous pull (i < 0) is open to every pod of the node, as
// upstream; a secret's is that secret's. A credential provider plugin's
// is kept as unknown (nil), so every pod shows credentials again: nodekit
// does not tell a plugin's node-wide credentials from those it gave for
// the pod's service account, and the stricter answer is the safe one.
func pulledWith(creds []sourcedAuth, i int) *kubeletv1beta1.ImagePullCredentials {
	switch {
	case i < 0 || i >= len(creds):
		return &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	case creds[i].secret != nil:
		return &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secretCoordinate(creds[i])}}
	}
	return nil
}

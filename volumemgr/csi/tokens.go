package csi

import (
	"context"
	"encoding/json"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
)

// tokensKey is where a driver finds its service-account tokens: in the
// volume context, or in the publish secrets (serviceAccountTokenInSecrets).
const tokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// serviceAccountTokens asks for one token of the pod's service account per
// tokenRequest of the driver, bound to the pod, and returns upstream's
// JSON object: audience → {token, expirationTimestamp}. An empty audience
// asks for the API server's default audiences, as upstream.
func (p *Plugin) serviceAccountTokens(ctx context.Context, pod *v1.Pod, pol *driverPolicy) (string, error) {
	out := map[string]authenticationv1.TokenRequestStatus{}
	for _, tr := range pol.tokenRequests {
		audiences := []string{tr.Audience}
		if tr.Audience == "" {
			audiences = []string{}
		}
		got, err := p.cfg.Tokens.CreateToken(ctx, pod.Namespace, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences:         audiences,
				ExpirationSeconds: tr.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
			},
		})
		if err != nil {
			return "", err
		}
		out[tr.Audience] = got.Status
	}
	b, err := json.Marshal(out)
	return string(b), err
}

package credentialprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	credv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"
)

// execTimeout bounds one run of a provider binary, as kubelet's.
const execTimeout = time.Minute

// Credential is a username and password a provider gave for a registry
// pattern (a key of its response's auth map).
type Credential struct {
	Username string
	Password string
	// account is the service account the provider gave it for (a
	// provider with tokenAttributes, for a pod with an account); nil for
	// the node's own credentials. Set by Keyring.LookupWithAccounts.
	account *kubeletv1beta1.ImagePullServiceAccount
}

// execPlugin runs a provider's binary with the request on stdin and
// decodes its response.
type execPlugin struct {
	name       string
	bin        string
	apiVersion string
	args       []string
	env        []string // the process environment, then the config's env
	clock      clock.PassiveClock
	metrics    *metrics // nil: none kept
}

// run asks the plugin about image (with the service account's token and
// annotations, when the provider has tokenAttributes) and blocks until it exits or
// execTimeout passes. The returned response is the caller's.
func (e *execPlugin) run(ctx context.Context, image, token string, annotations map[string]string) (*credv1.CredentialProviderResponse, error) {
	req, err := json.Marshal(&credv1.CredentialProviderRequest{
		TypeMeta: metav1.TypeMeta{Kind: "CredentialProviderRequest", APIVersion: e.apiVersion},
		Image:    image, ServiceAccountToken: token, ServiceAccountAnnotations: annotations,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to encode auth request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, e.bin, e.args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), &stdout, &stderr
	cmd.Env = e.env
	start := e.clock.Now()
	err = cmd.Run()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	e.metrics.observe(e.name, e.clock.Since(start).Seconds(), err != nil)
	if err != nil {
		return nil, fmt.Errorf("error execing credential provider plugin %s for image %s: %w: %s", e.name, image, err, stderr.String())
	}
	return e.decode(stdout.Bytes())
}

// decode checks the response's kind and apiVersion and decodes it
// strictly, with kubelet's messages.
func (e *execPlugin) decode(data []byte) (*credv1.CredentialProviderResponse, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, fmt.Errorf("error reading GVK from response: %w", err)
	}
	if tm.APIVersion != e.apiVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", e.apiVersion, tm.APIVersion)
	}
	if tm.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("failed to decode CredentialProviderResponse, unexpected Kind: %q", tm.Kind)
	}
	resp := &credv1.CredentialProviderResponse{}
	if err := yaml.UnmarshalStrict(data, resp); err != nil {
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	return resp, nil
}

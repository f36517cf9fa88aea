package criruntime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/imageref"
)

// normalizeImage validates an image reference and adds the :latest tag when
// it has neither tag nor digest, as upstream does before asking the runtime.
func normalizeImage(image string) (string, error) {
	ref, err := imageref.Parse(image)
	if err != nil {
		return "", err
	}
	if ref.Tag == "" && ref.Digest == "" {
		return image + ":latest", nil
	}
	return image, nil
}

// ensureImage makes the container's image present according to its pull
// policy and returns the image to create the container from.
// Failures are *nodekit.ActionError with the upstream reasons.
func (r *Runtime) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container, secrets []v1.Secret, sandbox *runtimeapi.PodSandboxConfig) (*runtimeapi.Image, error) {
	img, err := r.ensureImageRef(ctx, pod, c.Image, c.ImagePullPolicy, secrets, sandbox)
	if err != nil {
		// As upstream's start of a container whose image is not there:
		// the reason as the container's event, after the pull's own.
		r.events.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %s", err.Reason)
		err.Action, err.Target = nodekit.ActionStartContainer, c.Name
		return nil, err
	}
	return img, nil
}

// notePullFailure keeps a container image's failed pull for the rest of
// the sync (pullFailedThisSync).
func (st *syncState) notePullFailure(image string, err error) {
	var ae *nodekit.ActionError
	if !errors.As(err, &ae) || ae.Reason != nodekit.ErrImagePull {
		return
	}
	if st.failedPulls == nil {
		st.failedPulls = map[string]*nodekit.ActionError{}
	}
	st.failedPulls[image] = ae
}

// pullFailedThisSync fails container c without a pull when its image's
// pull already failed in this sync, as upstream's per-pod-and-image
// back-off does for the second container of an image: ImagePullBackOff
// with the Normal BackOff event and the first failure in the message.
func (r *Runtime) pullFailedThisSync(st *syncState, c *v1.Container, action nodekit.Action) *nodekit.ActionError {
	prev, ok := st.failedPulls[c.Image]
	if !ok {
		return nil
	}
	msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
	r.events.Eventf(st.Pod, v1.EventTypeNormal, "BackOff", "%s", msg)
	r.events.Eventf(st.Pod, v1.EventTypeWarning, "Failed", "Error: %s", nodekit.ErrImagePullBackOff)
	return &nodekit.ActionError{Action: action, Target: c.Name, Reason: nodekit.ErrImagePullBackOff,
		Message: fmt.Sprintf("%s: %s: %s", msg, prev.Reason, prev.Message), Err: prev.Err}
}

// ensureImageRef makes image present according to policy (the container's
// or an image volume's) and returns it, with upstream's events. A failure
// is an *nodekit.ActionError with the reason and message; the caller fills
// in its Action and Target.
func (r *Runtime) ensureImageRef(ctx context.Context, pod *v1.Pod, requested string, policy v1.PullPolicy, secrets []v1.Secret, sandbox *runtimeapi.PodSandboxConfig) (*runtimeapi.Image, *nodekit.ActionError) {
	fail := func(reason nodekit.Reason, msg string, err error) *nodekit.ActionError {
		return &nodekit.ActionError{Reason: reason, Message: msg, Err: err}
	}
	image, err := normalizeImage(requested)
	if err != nil {
		r.events.Eventf(pod, v1.EventTypeWarning, "InspectFailed", "Failed to apply default image tag %q: %v", requested, err)
		return nil, fail(nodekit.ErrInvalidImageName, fmt.Sprintf("Failed to apply default image tag %q: %v", requested, err), nil)
	}
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: requested}
	st, err := r.is.ImageStatus(ctx, spec, false)
	if err != nil {
		r.events.Eventf(pod, v1.EventTypeWarning, "InspectFailed", "Failed to inspect image %q: %v", requested, err)
		return nil, fail(nodekit.ErrImageInspect, fmt.Sprintf("Failed to inspect image %q: %v", requested, err), err)
	}
	present := st.GetImage() != nil
	if policy == "" {
		// The API server defaults this; pods from files and tests may not.
		policy = v1.PullIfNotPresent
		if strings.HasSuffix(image, ":latest") {
			policy = v1.PullAlways
		}
	}
	// The credentials are looked up once, and only when needed: for the
	// pull, or for the records to match the pod's against.
	lookup := sync.OnceValue(func() []sourcedAuth { return r.pullCredentials(ctx, pod, image, secretCredentials(image, secrets)) })
	podCreds := func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount) {
		return podCredentials(lookup())
	}
	switch {
	case present && policy != v1.PullAlways && r.cfg.PullRecords == nil:
		r.events.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine", requested)
		return st.GetImage(), nil
	case present && policy != v1.PullAlways && !r.cfg.PullRecords.MustPull(ctx, requested, st.GetImage().GetId(), podCreds):
		r.events.Eventf(pod, v1.EventTypeNormal, "Pulled", "Container image %q already present on machine and can be accessed by the pod", requested)
		return st.GetImage(), nil
	case policy == v1.PullNever:
		// Absent, or present but not for this pod's credentials: as
		// upstream, the same answer, so that the image's presence is not
		// revealed.
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", requested)
		r.events.Eventf(pod, v1.EventTypeWarning, "ErrImageNeverPull", "%s", msg)
		return nil, fail(nodekit.ErrImageNeverPull, msg, nil)
	}

	// As upstream, Pulling is reported when the pull is asked for, before
	// any wait for a turn; Pulled gives the pull's own time and the time
	// including that wait.
	creds := lookup()
	if rec := r.cfg.PullRecords; rec != nil {
		if err := rec.RecordIntent(ctx, requested); err != nil {
			msg := fmt.Sprintf("Failed to record image pull intent for container image %q: %v", requested, err)
			return nil, fail(nodekit.ErrImagePull, msg, err)
		}
	}
	r.events.Eventf(pod, v1.EventTypeNormal, "Pulling", "Pulling image %q", requested)
	asked := r.cfg.Clock.Now()
	res, err := r.pullImage(ctx, spec, authConfigs(creds), sandbox) // pull.go
	if err != nil {
		if rec := r.cfg.PullRecords; rec != nil {
			rec.RecordFailed(ctx, requested)
		}
		// Upstream's event names the image; the status message is the
		// pull's error alone (the back-off's message repeats it).
		r.events.Eventf(pod, v1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", requested, err)
		return nil, fail(nodekit.ErrImagePull, err.Error(), err)
	}
	if rec := r.cfg.PullRecords; rec != nil {
		rec.RecordPulled(ctx, requested, res.image.GetId(), pulledWith(creds, res.cred))
	}
	r.metrics.ObserveImagePull(pod.UID, res.image.GetSize(), asked, r.cfg.Clock.Now())
	r.events.Eventf(pod, v1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		requested, res.took.Truncate(time.Millisecond), r.cfg.Clock.Since(asked).Truncate(time.Millisecond), res.image.GetSize())
	return res.image, nil
}

// pullCredentials are the credentials to pull image with, in upstream's
// order: the pod's pull secrets that match the image's registry (given),
// then Config.Credentials' (the credential provider plugins), which are
// asked about the image's repository without tag or digest, as kubelet
// asks.
func (r *Runtime) pullCredentials(ctx context.Context, pod *v1.Pod, image string, podSecrets []sourcedAuth) []sourcedAuth {
	creds := podSecrets
	switch l := r.cfg.Credentials.(type) {
	case nil:
	case AccountLookup:
		auths, accounts := l.LookupWithAccounts(ctx, repositoryOf(image), pod)
		for i, a := range auths {
			var account *kubeletv1beta1.ImagePullServiceAccount
			if i < len(accounts) {
				account = accounts[i]
			}
			creds = append(creds, sourcedAuth{auth: a, plugin: true, tracked: true, account: account})
		}
	default:
		for _, a := range l.Lookup(ctx, repositoryOf(image), pod) {
			creds = append(creds, sourcedAuth{auth: a, plugin: true})
		}
	}
	return creds
}

// pull tries each credential in turn and returns the first success and
// the index of the credential that pulled (-1: anonymous); with no
// credentials it pulls anonymously. As upstream, an image with
// credentials is not then tried anonymously, and the error of the failed
// tries is their aggregate (one error's own message when there was one).
func (r *Runtime) pull(ctx context.Context, spec *runtimeapi.ImageSpec, creds []*runtimeapi.AuthConfig, sandbox *runtimeapi.PodSandboxConfig) (string, int, error) {
	if len(creds) == 0 {
		ref, err := r.is.PullImage(ctx, spec, nil, sandbox)
		return ref, -1, err
	}
	var errs []error
	for i, auth := range creds {
		ref, err := r.is.PullImage(ctx, spec, auth, sandbox)
		if err == nil {
			return ref, i, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return "", -1, utilerrors.NewAggregate(errs)
}

// repositoryOf is image's repository, fully qualified and without tag or
// digest (docker.io/library/busybox for busybox:1.37), as upstream's
// parsers.ParseImageName gives it to the credential providers.
func repositoryOf(image string) string {
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	first, rest, found := strings.Cut(repo, "/")
	switch {
	case !found:
		return "docker.io/library/" + repo
	case first == "index.docker.io" || first == "docker.io":
		if !strings.Contains(rest, "/") {
			rest = "library/" + rest
		}
		return "docker.io/" + rest
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + repo
	}
	return repo
}

// dockerConfig is the content of a kubernetes.io/dockerconfigjson secret; a
// kubernetes.io/dockercfg secret holds just the Auths map.
type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
	Email    string `json:"email"`
}

// registryOf returns the registry host of an image reference, with Docker
// Hub's default.
func registryOf(image string) string {
	first, _, found := strings.Cut(image, "/")
	if !found || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return "docker.io"
	}
	return first
}

// credentialsFor returns the auth configs of the secrets whose registry key
// matches the image's registry (host, optionally with a scheme or path, as
// docker config keys are written).
func credentialsFor(image string, secrets []v1.Secret) []*runtimeapi.AuthConfig {
	return authConfigs(secretCredentials(image, secrets))
}

// secretCredentials is credentialsFor with each config's secret.
func secretCredentials(image string, secrets []v1.Secret) []sourcedAuth {
	want := registryOf(image)
	var out []sourcedAuth
	for i := range secrets {
		for key, a := range dockerAuths(&secrets[i]) {
			host := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
			host, _, _ = strings.Cut(host, "/")
			if host == "index.docker.io" || host == "registry-1.docker.io" {
				host = "docker.io"
			}
			if host != want {
				continue
			}
			user, pass := a.Username, a.Password
			if a.Auth != "" {
				if dec, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
					user, pass, _ = strings.Cut(string(dec), ":")
				}
			}
			// No ServerAddress, as upstream's keyring leaves it: the
			// runtime would then keep the credentials from every host
			// but that one, a registry mirror included.
			out = append(out, sourcedAuth{
				auth:   &runtimeapi.AuthConfig{Username: user, Password: pass},
				secret: &secrets[i], hash: credentialHash(user, pass, a.Email),
			})
		}
	}
	return out
}

// dockerAuths is the docker config of a kubernetes.io/dockerconfigjson or
// kubernetes.io/dockercfg secret; nil for other secrets and bad content.
func dockerAuths(s *v1.Secret) map[string]dockerAuth {
	if b, ok := s.Data[v1.DockerConfigJsonKey]; ok {
		var dc dockerConfig
		if json.Unmarshal(b, &dc) != nil {
			return nil
		}
		return dc.Auths
	}
	if b, ok := s.Data[v1.DockerConfigKey]; ok {
		var auths map[string]dockerAuth
		if json.Unmarshal(b, &auths) != nil {
			return nil
		}
		return auths
	}
	return nil
}

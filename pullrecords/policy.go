package pullrecords

import (
	"fmt"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/internal/imageref"
)

// policy is imagePullCredentialsVerificationPolicy with its allowlist.
type policy struct {
	name kubeletv1beta1.ImagePullCredentialsVerificationPolicy
	// exact and prefixes are the allowlist's image names and "/*"
	// patterns (without the "*"), for NeverVerifyAllowlistedImages.
	exact    map[string]bool
	prefixes []string
}

// newPolicy checks the policy name and the allowlist as kubelet's
// validation does; "" is NeverVerifyPreloadedImages, the default.
func newPolicy(name kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allowlist []string) (*policy, error) {
	if name == "" {
		name = kubeletv1beta1.NeverVerifyPreloadedImages
	}
	switch name {
	case kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.AlwaysVerify:
		if len(allowlist) > 0 {
			return nil, fmt.Errorf("preloadedImagesVerificationAllowlist: only allowed with imagePullCredentialsVerificationPolicy %q, not %q", kubeletv1beta1.NeverVerifyAllowlistedImages, name)
		}
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
	default:
		return nil, fmt.Errorf("imagePullCredentialsVerificationPolicy: unknown policy %q", name)
	}
	p := &policy{name: name, exact: map[string]bool{}}
	for i, pattern := range allowlist {
		norm, wildcard, err := allowlistPattern(pattern)
		if err != nil {
			return nil, fmt.Errorf("preloadedImagesVerificationAllowlist[%d]: %w", i, err)
		}
		if wildcard {
			p.prefixes = append(p.prefixes, norm)
		} else {
			p.exact[norm] = true
		}
	}
	return p, nil
}

// mustVerify says whether the policy asks for the pod's credentials to be
// checked for a present image; pulledByAgent is whether any record or
// intent says the agent (or kubelet before it) pulled it.
func (p *policy) mustVerify(image string, pulledByAgent bool) bool {
	switch p.name {
	case kubeletv1beta1.NeverVerify:
		return false
	case kubeletv1beta1.AlwaysVerify:
		return true
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
		return !p.allowlisted(image)
	}
	// NeverVerifyPreloadedImages: an image no record knows was put
	// there by something else (preloaded).
	return pulledByAgent
}

func (p *policy) allowlisted(image string) bool {
	name, err := trimTagDigest(image)
	if err != nil {
		name = image // best effort, as kubelet
	}
	if p.exact[name] {
		return true
	}
	for _, prefix := range p.prefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// allowlistPattern checks one allowlist entry: an image name without tag
// or digest, or a prefix ending in "/*" (a whole path segment wildcard).
// It returns the name, or the prefix without its "*".
func allowlistPattern(pattern string) (string, bool, error) {
	if pattern != strings.TrimSpace(pattern) {
		return "", false, fmt.Errorf("leading/trailing spaces are not allowed: %s", pattern)
	}
	trimmed, wildcard := strings.CutSuffix(pattern, "/*")
	if wildcard {
		trimmed += "/"
	}
	switch {
	case trimmed == "":
		return "", false, fmt.Errorf("the supplied pattern is too short: %s", pattern)
	case strings.ContainsRune(trimmed, '*'):
		return "", false, fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %s", pattern)
	case wildcard && trimmed == "/":
		return "", false, fmt.Errorf("at least registry hostname is required")
	case wildcard:
		return trimmed, true, nil
	}
	name, err := trimTagDigest(trimmed)
	if err != nil {
		return "", false, fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if name != trimmed {
		return "", false, fmt.Errorf("neither tag nor digest is accepted in an image reference: %s", pattern)
	}
	return trimmed, false, nil
}

// trimTagDigest is image as the pod names it without its tag and digest
// (the key of a record's credential mapping): "busybox:1.37@sha256:..."
// gives "busybox". The name is not qualified further.
func trimTagDigest(image string) (string, error) {
	ref, err := imageref.Parse(image)
	if err != nil {
		return "", err
	}
	return ref.Name, nil
}

package pullrecords

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// MustPull says whether a pod must pull image (as its container names
// it), although the runtime holds it as imageRef, before it may use it:
// the policy asks for verification and no record shows the pod's
// credentials (secrets: namespace, name and UID, or the same credential
// hash; or its service account) or "any pod" for the image's name. An
// unreadable record counts as no record: the pod pulls. An empty imageRef
// (the image is absent) always needs a pull.
//
// creds gives the pod's credentials for the image: its pull secrets that
// match the image's registry (namespace, name, UID and credential hash)
// and the service account a credential provider gave credentials for
// (nil: none). MustPull calls it at most once, and only when the record
// holds secrets or service accounts to match; nil means none. MustPull
// blocks on the record files and on creds. Each check of a present image
// counts in kubelet_imagemanager_image_mustpull_checks_total by its
// result.
func (v *Verifier) MustPull(ctx context.Context, image, imageRef string, creds func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount)) bool {
	if imageRef == "" {
		return true
	}
	must, result := v.mustPull(ctx, image, imageRef, creds)
	v.metrics.checks.WithLabelValues(result).Inc()
	return must
}

func (v *Verifier) mustPull(ctx context.Context, image, imageRef string, creds func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount)) (bool, string) {
	logger := klog.FromContext(ctx)
	// The lock is not held while creds runs (it may run a plugin): the
	// record read here is never changed in place, and a write after a
	// match takes the lock again.
	rec, pulledByAgent, err := v.lookup(image, imageRef)
	if err != nil {
		logger.Error(err, "Unable to access cache records about image pulls")
		return true, resultError
	}
	if !v.policy.mustVerify(image, pulledByAgent) {
		return false, resultPolicyAllowed
	}
	if rec == nil {
		return true, resultMustAuthenticate
	}
	name, err := trimTagDigest(image)
	if err != nil {
		logger.Error(err, "Failed to parse image name, forcing image credentials reverification", "image", image)
		return true, resultError
	}
	cached, ok := rec.CredentialMapping[name]
	switch {
	case !ok:
		return true, resultMustAuthenticate
	case cached.NodePodsAccessible:
		return false, resultRecordFound
	case len(cached.KubernetesSecrets) == 0 && len(cached.KubernetesServiceAccounts) == 0:
		return true, resultMustAuthenticate
	}
	var secrets []kubeletv1beta1.ImagePullSecret
	var sa *kubeletv1beta1.ImagePullServiceAccount
	if creds != nil {
		secrets, sa = creds()
	}
	for _, s := range secrets {
		if v.secretMatches(ctx, image, imageRef, cached.KubernetesSecrets, s) {
			return false, resultRecordFound
		}
	}
	if sa != nil && slices.Contains(cached.KubernetesServiceAccounts, *sa) {
		return false, resultRecordFound
	}
	return true, resultMustAuthenticate
}

// lookup reads the record of imageRef and whether the agent (or kubelet
// before it) pulled the image: a record, a pull in progress, or an intent
// a previous run left.
func (v *Verifier) lookup(image, imageRef string) (*kubeletv1beta1.ImagePulledRecord, bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	rec, err := v.store.record(imageRef)
	if err != nil {
		return nil, false, err
	}
	if rec != nil || v.intents[image] > 0 {
		return rec, true, nil
	}
	ok, err := v.store.intentExists(image)
	if err != nil {
		return nil, false, fmt.Errorf("failed to check existence of an image pull intent: %w", err)
	}
	return nil, ok, nil
}

// secretMatches says whether pod secret s opens the image: a
// recorded secret with the same credential hash (another secret holding
// the same credentials), or the same secret (namespace, name, UID) whose
// content changed since (only while the record holds fewer than
// matchWriteLimit secrets). s is then added to the record, as kubelet
// does, while the record is that small.
func (v *Verifier) secretMatches(ctx context.Context, image, imageRef string, cached []kubeletv1beta1.ImagePullSecret, s kubeletv1beta1.ImagePullSecret) bool {
	for _, c := range cached {
		sameHash := c.CredentialHash != "" && c.CredentialHash == s.CredentialHash
		sameSecret := c.UID == s.UID && c.Namespace == s.Namespace && c.Name == s.Name
		if !sameHash && !sameSecret {
			continue
		}
		small := len(cached) < matchWriteLimit
		if !sameHash && !small {
			// As kubelet: a secret whose content changed is trusted only
			// while the record is small enough to take it.
			continue
		}
		if (!sameHash || !sameSecret) && small {
			creds := &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{s}}
			v.mu.Lock()
			err := v.mergeLocked(ctx, image, imageRef, creds)
			v.mu.Unlock()
			if err != nil {
				klog.FromContext(ctx).Error(err, "Failed to write an image pulled record", "image", image, "imageRef", imageRef)
			}
		}
		return true
	}
	return false
}

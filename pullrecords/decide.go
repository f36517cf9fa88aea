package pullrecords

import (
	"context"

	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// MustPull says whether a pod must pull image (as its container names
// it), although the runtime holds it as imageRef, before it may use it:
// the policy asks for verification and no record shows the pod's
// credentials (secrets: namespace, name and UID, or the same credential
// hash; or its service account) or "any pod" for the image's name. An
// unreadable record counts as no record: the pod pulls. An empty imageRef
// (the image is absent) always needs a pull. It blocks on the record
// files only.
func (v *Verifier) MustPull(ctx context.Context, image, imageRef string, secrets []kubeletv1beta1.ImagePullSecret, sa *kubeletv1beta1.ImagePullServiceAccount) bool {
	if imageRef == "" {
		return true
	}
	logger := klog.FromContext(ctx)
	v.mu.Lock()
	defer v.mu.Unlock()
	rec, err := v.files.record(imageRef)
	pulledByAgent := rec != nil || v.intents[image] > 0
	if err != nil {
		logger.Error(err, "Unable to access cache records about image pulls")
		return true
	}
	if !pulledByAgent {
		// No record: it may still be an intent a previous run left.
		ok, err := v.files.intentExists(image)
		if err != nil {
			logger.Error(err, "Unable to access cache records about image pulls")
			return true
		}
		pulledByAgent = ok
	}
	if !v.policy.mustVerify(image, pulledByAgent) {
		return false
	}
	if rec == nil {
		return true
	}
	name, err := trimTagDigest(image)
	if err != nil {
		logger.Error(err, "Failed to parse image name, forcing image credentials reverification", "image", image)
		return true
	}
	cached, ok := rec.CredentialMapping[name]
	switch {
	case !ok:
		return true
	case cached.NodePodsAccessible:
		return false
	}
	for _, s := range secrets {
		if v.secretMatchesLocked(ctx, image, imageRef, cached.KubernetesSecrets, s) {
			return false
		}
	}
	return sa == nil || !containsSA(cached.KubernetesServiceAccounts, *sa)
}

// secretMatchesLocked says whether pod secret s opens the image: a
// recorded secret with the same credential hash (another secret holding
// the same credentials), or the same secret (namespace, name, UID) whose
// content changed since (only while the record holds fewer than
// matchWriteLimit secrets). s is then added to the record, as kubelet
// does, while the record is that small.
func (v *Verifier) secretMatchesLocked(ctx context.Context, image, imageRef string, cached []kubeletv1beta1.ImagePullSecret, s kubeletv1beta1.ImagePullSecret) bool {
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
			if err := v.mergeLocked(image, imageRef, creds); err != nil {
				klog.FromContext(ctx).Error(err, "Failed to write an image pulled record", "image", image, "imageRef", imageRef)
			}
		}
		return true
	}
	return false
}

func containsSA(list []kubeletv1beta1.ImagePullServiceAccount, sa kubeletv1beta1.ImagePullServiceAccount) bool {
	for _, s := range list {
		if s == sa {
			return true
		}
	}
	return false
}

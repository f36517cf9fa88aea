package pullrecords

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// matchWriteLimit bounds how many secrets a record may hold before a
// match by hash or by coordinates alone stops adding the pod's secret to
// it, as kubelet does against namespace churn.
const matchWriteLimit = 100

// Config configures a Verifier.
type Config struct {
	// RootDir is the agent's root directory (kubelet's --root-dir);
	// records are kept under RootDir/image_manager. Required.
	RootDir string
	// Policy is imagePullCredentialsVerificationPolicy; "" means
	// NeverVerifyPreloadedImages, kubelet's default.
	Policy kubeletv1beta1.ImagePullCredentialsVerificationPolicy
	// Allowlist is preloadedImagesVerificationAllowlist (only with
	// NeverVerifyAllowlistedImages): image names without tag or digest,
	// or prefixes ending in "/*".
	Allowlist []string
	// Clock stamps the records' lastUpdatedTime. Default: the real clock.
	Clock clock.PassiveClock
	// MaxPods and MaxParallelPulls (maxPods, maxParallelImagePulls) size
	// the in-memory caches of intents and records as kubelet does; 0
	// means kubelet's default of 110 pods and no parallel pulls.
	MaxPods, MaxParallelPulls int
}

// Verifier keeps the pull records and answers MustPull. Its methods are
// safe for concurrent use; each blocks only on the record files.
type Verifier struct {
	files   *files
	store   *store // files behind the in-memory caches; under mu
	policy  *policy
	clock   clock.PassiveClock
	metrics *metrics

	mu      sync.Mutex
	intents map[string]int // image -> pulls in progress in this process
}

// New checks cfg and opens (creating) the record directories. Records in
// an older version are rewritten in the current one; files that do not
// decode are logged and left alone. The in-memory caches are filled from
// the files.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if cfg.RootDir == "" {
		return nil, fmt.Errorf("pullrecords: Config.RootDir is required")
	}
	p, err := newPolicy(cfg.Policy, cfg.Allowlist)
	if err != nil {
		return nil, err
	}
	f, err := newFiles(cfg.RootDir)
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	v := &Verifier{files: f, policy: p, clock: cfg.Clock, metrics: newMetrics(), intents: map[string]int{}}
	v.migrate(ctx)
	v.store = newStore(ctx, f, v.metrics, cfg.MaxPods, cfg.MaxParallelPulls)
	return v, nil
}

// migrate rewrites files of an older version in the current one.
func (v *Verifier) migrate(ctx context.Context) {
	logger := klog.FromContext(ctx)
	err := each(v.files.pulling, func(path string, b []byte) error {
		in, current, err := decodeIntent(b)
		if err != nil {
			return fmt.Errorf("decode ImagePullIntent %s: %w", path, err)
		}
		if !current {
			return v.files.writeIntent(in.Image)
		}
		return nil
	})
	if err != nil {
		logger.Error(err, "Error migrating image pull intents")
	}
	err = each(v.files.pulled, func(path string, b []byte) error {
		rec, current, err := decodeRecord(b)
		if err != nil {
			return fmt.Errorf("decode ImagePulledRecord %s: %w", path, err)
		}
		if !current {
			return v.files.writeRecord(rec)
		}
		return nil
	})
	if err != nil {
		logger.Error(err, "Error migrating image pulled records")
	}
}

// Recover turns the intents a previous run left (it stopped during a
// pull) into records without credentials for the images the runtime now
// holds under the intent's name, so those images count as pulled by the
// agent and every pod must show credentials for them. Call it once at
// start-up, before the first pull.
func (v *Verifier) Recover(ctx context.Context, images []*runtimeapi.Image) {
	logger := klog.FromContext(ctx)
	left := map[string]bool{}
	intents, err := v.files.intents()
	if err != nil {
		logger.Error(err, "Error listing image pull intents, continuing with an incomplete list")
	}
	for _, img := range intents {
		left[img] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, img := range images {
		for _, name := range slices.Concat(img.GetRepoDigests(), img.GetRepoTags()) {
			if !left[name] {
				continue
			}
			if err := v.mergeLocked(ctx, name, img.GetId(), nil); err != nil {
				logger.Error(err, "Failed to write an image pulled record", "imageRef", img.GetId())
				continue
			}
			if err := v.store.deleteIntent(ctx, name); err != nil {
				logger.V(2).Info("Failed to remove image pull intent", "image", name, "err", err)
			}
		}
	}
}

// RecordIntent writes the intent to pull image (as the pod names it)
// before the pull; each call must be followed by one RecordPulled or
// RecordFailed. An error means the pull must not go ahead.
func (v *Verifier) RecordIntent(ctx context.Context, image string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.store.writeIntent(ctx, image); err != nil {
		return fmt.Errorf("failed to record image pull intent: %w", err)
	}
	v.intents[image]++
	return nil
}

// RecordPulled records that image was pulled as imageRef with creds (nil:
// unknown credentials, which every later pod must show again) and ends
// the intent. A failure to write is logged, and the intent then stays so
// that the image still counts as pulled by the agent.
func (v *Verifier) RecordPulled(ctx context.Context, image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.mergeLocked(ctx, image, imageRef, creds); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to write image pulled record", "imageRef", imageRef)
		return
	}
	v.endIntentLocked(ctx, image)
}

// RecordFailed ends an intent whose pull failed.
func (v *Verifier) RecordFailed(ctx context.Context, image string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.endIntentLocked(ctx, image)
}

func (v *Verifier) endIntentLocked(ctx context.Context, image string) {
	if v.intents[image] > 1 {
		v.intents[image]--
		return
	}
	if err := v.store.deleteIntent(ctx, image); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove image pull intent", "image", image)
		return
	}
	delete(v.intents, image)
}

// mergeLocked adds creds for image to the record of imageRef, writing it
// only when it changed; a record that does not decode is replaced.
func (v *Verifier) mergeLocked(ctx context.Context, image, imageRef string, creds *kubeletv1beta1.ImagePullCredentials) error {
	name, err := trimTagDigest(image)
	if err != nil {
		return err
	}
	rec, err := v.store.record(imageRef)
	if err != nil {
		rec = nil // replaced below
	}
	if rec != nil {
		rec = rec.DeepCopy() // the cache's until written
	}
	if rec == nil {
		rec = &kubeletv1beta1.ImagePulledRecord{ImageRef: imageRef, CredentialMapping: map[string]kubeletv1beta1.ImagePullCredentials{}}
		if creds != nil {
			rec.CredentialMapping[name] = *creds
		}
	} else if !mergeCreds(rec, name, creds) {
		return nil
	}
	rec.LastUpdatedTime = metav1.NewTime(v.clock.Now())
	return v.store.writeRecord(ctx, rec)
}

// mergeCreds merges creds into rec's entry for name; it reports whether
// rec changed.
func mergeCreds(rec *kubeletv1beta1.ImagePulledRecord, name string, creds *kubeletv1beta1.ImagePullCredentials) bool {
	if creds == nil || (!creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0) {
		return false
	}
	if rec.CredentialMapping == nil {
		rec.CredentialMapping = map[string]kubeletv1beta1.ImagePullCredentials{}
	}
	cur, ok := rec.CredentialMapping[name]
	switch {
	case !ok:
		cur = *creds
	case cur.NodePodsAccessible:
		return false
	case creds.NodePodsAccessible:
		cur = kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	default:
		secrets, s := mergeSecrets(cur.KubernetesSecrets, creds.KubernetesSecrets)
		sas, a := mergeServiceAccounts(cur.KubernetesServiceAccounts, creds.KubernetesServiceAccounts)
		if !s && !a {
			return false
		}
		cur.KubernetesSecrets, cur.KubernetesServiceAccounts = secrets, sas
	}
	rec.CredentialMapping[name] = cur
	return true
}

// mergeSecrets adds add to have, one entry per namespace/name/UID (add's
// hash wins), sorted by namespace, name, UID.
func mergeSecrets(have, add []kubeletv1beta1.ImagePullSecret) ([]kubeletv1beta1.ImagePullSecret, bool) {
	out := slices.Clone(have)
	changed := false
	for _, s := range add {
		i := slices.IndexFunc(out, func(o kubeletv1beta1.ImagePullSecret) bool {
			return o.Namespace == s.Namespace && o.Name == s.Name && o.UID == s.UID
		})
		switch {
		case i < 0:
			out = append(out, s)
			changed = true
		case out[i].CredentialHash != s.CredentialHash:
			out[i].CredentialHash = s.CredentialHash
			changed = true
		}
	}
	slices.SortFunc(out, func(a, b kubeletv1beta1.ImagePullSecret) int {
		return strings.Compare(a.Namespace+"\x00"+a.Name+"\x00"+a.UID, b.Namespace+"\x00"+b.Name+"\x00"+b.UID)
	})
	return out, changed
}

func mergeServiceAccounts(have, add []kubeletv1beta1.ImagePullServiceAccount) ([]kubeletv1beta1.ImagePullServiceAccount, bool) {
	out := slices.Clone(have)
	changed := false
	for _, s := range add {
		if !slices.Contains(out, s) {
			out = append(out, s)
			changed = true
		}
	}
	slices.SortFunc(out, func(a, b kubeletv1beta1.ImagePullServiceAccount) int {
		return strings.Compare(a.Namespace+"\x00"+a.Name+"\x00"+a.UID, b.Namespace+"\x00"+b.Name+"\x00"+b.UID)
	})
	return out, changed
}

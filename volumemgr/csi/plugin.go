package csi

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/selinux"
	"github.com/nodekit/nodekit/volumemgr"
)

// PluginConfig configures a Plugin.
type PluginConfig struct {
	// RootDir is the agent's root directory; staged volumes live under
	// ROOT/plugins/kubernetes.io/csi. Required.
	RootDir string
	// Drivers is the registry Handler fills. Required.
	Drivers *Drivers
	// API resolves claims, volumes and CSIDriver objects. Required.
	API API
	// NodeName is the node's name, written to vol_data.json.
	NodeName types.NodeName
	// Mounter reads the mount table; nil means volumemgr.HostMounter{}.
	Mounter volumemgr.Mounter
	// Timeout bounds each driver call; zero means DefaultTimeout.
	Timeout time.Duration
	// Metrics, if set, observes the driver calls and the mount and
	// unmount operations (RegisterMetrics).
	Metrics *Metrics
	// Clock stamps volume stats; nil means the real clock.
	Clock clock.PassiveClock
	// Tokens requests the service-account tokens a CSIDriver's
	// tokenRequests ask for; nil refuses such drivers' volumes.
	Tokens volumemgr.TokenRequester
	// Attach reads the Node and VolumeAttachment objects, to wait for the
	// controller's attachment of volumes whose driver requires it
	// (attach.go); nil fails such volumes' SetUp. FromClient's API fits.
	Attach AttachAPI
	// Events records the FileSystemResizeSuccessful and
	// FileSystemResizeFailed events of online expansion on the pod and
	// the claim, and upstream's two SuccessfulMountVolume events
	// ("MapVolume.MapPodDevice succeeded ...") of each publish of a raw
	// block volume on the pod; nil discards them.
	Events volumemgr.EventRecorder
	// SELinux is the host's SELinux (context mounts, seclabel); nil means
	// the real host's.
	SELinux volumemgr.SELinux
}

// Plugin is the "kubernetes.io/csi" volume plugin.
type Plugin struct {
	cfg PluginConfig
	// locks serializes the operations on one volume (driver and handle):
	// the reconciler sets up and tears down pods in parallel, and staging
	// is shared by the pods of a volume (upstream's per-volume operation
	// lock).
	locksMu sync.Mutex
	locks   map[string]*volumeLock
	// published holds the targets this process published (and has not
	// unpublished since); a SetUp of one again only looks for expansion,
	// unless the driver asks for republishing. It holds the staging
	// directories of file system volumes this process staged, too.
	publishedMu sync.Mutex
	published   map[string]bool
	// blockSpecs holds the PV (spec) name of each raw block volume this
	// process set up (or began to), by pod UID and pod volume name: the
	// pod's volume directory holds nothing of a block volume (block.go).
	// dirs holds, by pod UID and pod volume name, the directory name of a
	// file system volume this process published elsewhere than under the
	// pod volume's name (VolumeDirName: a claim's PV), for VolumeStats.
	blockMu    sync.Mutex
	blockSpecs map[string]string
	dirs       map[string]string
	// seLinux holds, by volume (driver^handle) and pod, the SELinux label
	// each pod set the volume up with, for a driver with seLinuxMount
	// (selinux.go).
	seLinuxMu sync.Mutex
	seLinux   map[string]map[types.UID]string
	// wanted holds, by pod volume directory, the persistent volume
	// whose set-up began there and which is not torn down (wanted.go).
	wantedMu sync.Mutex
	wanted   map[string]wantedVolume
}

func (p *Plugin) isPublished(target string) bool {
	p.publishedMu.Lock()
	defer p.publishedMu.Unlock()
	return p.published[target]
}

func (p *Plugin) setPublished(target string, on bool) {
	p.publishedMu.Lock()
	defer p.publishedMu.Unlock()
	if on {
		p.published[target] = true
	} else {
		delete(p.published, target)
	}
}

type volumeLock struct {
	mu    sync.Mutex
	users int
}

// lock takes the lock of a volume and returns its release.
func (p *Plugin) lock(driver, handle string) func() {
	key := driver + "^" + handle
	p.locksMu.Lock()
	l := p.locks[key]
	if l == nil {
		l = &volumeLock{}
		p.locks[key] = l
	}
	l.users++
	p.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		p.locksMu.Lock()
		if l.users--; l.users == 0 {
			delete(p.locks, key)
		}
		p.locksMu.Unlock()
	}
}

var _ volumemgr.Plugin = (*Plugin)(nil)

// NewPlugin checks cfg and returns a Plugin.
func NewPlugin(cfg PluginConfig) (*Plugin, error) {
	switch {
	case cfg.RootDir == "":
		return nil, errors.New("csi: PluginConfig.RootDir is required")
	case cfg.Drivers == nil:
		return nil, errors.New("csi: PluginConfig.Drivers is required")
	case cfg.API == nil:
		return nil, errors.New("csi: PluginConfig.API is required")
	}
	if cfg.Mounter == nil {
		cfg.Mounter = volumemgr.HostMounter{}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Events == nil {
		cfg.Events = discardEvents{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SELinux == nil {
		cfg.SELinux = selinux.Host{}
	}
	return &Plugin{cfg: cfg, locks: map[string]*volumeLock{}, published: map[string]bool{}, blockSpecs: map[string]string{},
		dirs: map[string]string{}, seLinux: map[string]map[types.UID]string{}, wanted: map[string]wantedVolume{}}, nil
}

// Name is upstream's plugin name.
func (*Plugin) Name() string { return PluginName }

// CanSupport accepts persistentVolumeClaim, ephemeral and csi volumes; a
// claim whose PV is not a CSI volume fails in SetUp.
func (*Plugin) CanSupport(vol *v1.Volume) bool {
	return vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil || vol.CSI != nil
}

// The keys of vol_data.json, as upstream's.
const (
	keySpecName  = "specVolID"
	keyHandle    = "volumeHandle"
	keyDriver    = "driverName"
	keyNode      = "nodeName"
	keyAttach    = "attachmentID"
	keyLifecycle = "volumeLifecycleMode"
	volDataFile  = "vol_data.json"
)

// stagingDir is ROOT/plugins/kubernetes.io/csi/DRIVER/SHA256(HANDLE)/globalmount.
func (p *Plugin) stagingDir(driver, handle string) string {
	return filepath.Join(p.cfg.RootDir, "plugins", PluginName, driver, fmt.Sprintf("%x", sha256.Sum256([]byte(handle))), "globalmount")
}

// attachmentName is upstream's VolumeAttachment name for the volume.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// SetUp resolves the volume, stages it when the driver stages, and
// publishes it into req.Dir/mount (a block volume: block.go), then looks
// for online expansion (expand.go). Once the volume is resolved, the
// operation is observed as upstream's "volume_mount" ("map_volume" for a
// block volume).
func (p *Plugin) SetUp(ctx context.Context, req *volumemgr.SetUpRequest) (res *volumemgr.SetUpResult, err error) {
	src, err := p.resolve(ctx, req.Pod, req.Volume)
	if err != nil {
		return nil, err
	}
	defer nameStep(&err, src, req.Volume.Name)
	defer p.cfg.Metrics.operation(src.driver, operationName(src.block, "volume_mount", "map_volume"))(&err)
	pol, err := p.policy(ctx, src)
	if err != nil {
		return nil, err
	}
	var publishContext map[string]string
	if pol.attachRequired {
		if publishContext, err = p.waitForAttach(ctx, src); err != nil { // attach.go
			return nil, err
		}
	}
	endpoint, err := p.cfg.Drivers.endpoint(src.driver)
	if err != nil {
		return nil, errors.New(logf("mounter.SetUpAt failed to get CSI client: %v", err))
	}
	c, err := dial(endpoint, src.driver, p.cfg.Metrics)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if src.mode, err = driverAccessMode(ctx, c, src); err != nil { // accessmode.go
		return nil, err
	}
	data := p.volumeData(req, src)
	if src.block {
		defer p.lock(src.driver, src.handle)()
		return p.setUpBlock(ctx, c, req, src, pol, data, publishContext) // block.go
	}
	return p.setUpMount(ctx, c, req, src, pol, data, publishContext)
}

// nameStep makes a set-up error name upstream's operation step and the
// volume as upstream's volume spec names it (a claim's PV, an inline
// volume's pod volume name) in the FailedMount event:
// MountVolume.SetUp, or MapVolume.MapPodDevice for a block volume, unless
// the error names its step already (staging's MountVolume.MountDevice or
// MapVolume.SetUpDevice, WaitForAttach); a PendingError is left as it is.
func nameStep(err *error, src *source, podVolume string) {
	var se *volumemgr.StepError
	var pe *volumemgr.PendingError
	if *err == nil || errors.As(*err, &se) || errors.As(*err, &pe) {
		return
	}
	step := "MountVolume.SetUp"
	if src.block {
		step = "MapVolume.MapPodDevice"
	}
	*err = &volumemgr.StepError{Step: step, Volume: src.specName(podVolume), Err: *err}
}

// specName is upstream's volume spec name of the volume: its PV's name,
// else the pod volume's.
func (s *source) specName(podVolume string) string {
	if s.pv != nil {
		return s.pv.Name
	}
	return podVolume
}

// volumeData is what SetUp writes to the volume's vol_data.json: its spec
// name, handle, driver, node, lifecycle and VolumeAttachment name.
func (p *Plugin) volumeData(req *volumemgr.SetUpRequest, src *source) map[string]string {
	return map[string]string{
		keySpecName: src.specName(req.Volume.Name), keyHandle: src.handle, keyDriver: src.driver, keyNode: string(p.cfg.NodeName),
		keyLifecycle: string(src.lifecycle), keyAttach: attachmentName(src.handle, src.driver, string(p.cfg.NodeName)),
	}
}

// setUpMount is SetUp of a filesystem volume, under the volume's lock:
// it publishes the volume at req.Dir/mount (staging it first when
// persistent) unless this process has published it already, applies the
// pod's fsGroup when the driver did not, and looks for online expansion
// and an SELinux relabel.
func (p *Plugin) setUpMount(ctx context.Context, c *nodeClient, req *volumemgr.SetUpRequest, src *source, pol *driverPolicy,
	data, publishContext map[string]string) (res *volumemgr.SetUpResult, err error) {
	mountGroup, err := volumeMountGroup(ctx, c, req.Pod)
	if err != nil {
		return nil, err
	}
	defer p.lock(src.driver, src.handle)()
	target := filepath.Join(req.Dir, "mount")
	capability, label, err := p.contextCapability(ctx, req, src, pol, mountGroup, data) // selinux.go
	if err != nil {
		return nil, err
	}
	defer p.forgetSELinuxOnFailure(&err, src, req.Pod.UID, target)
	// Past the SELinux check (upstream's desired state): the pod wants
	// the volume, and may get it if it is not another pod's alone.
	p.want(src, req.Dir) // wanted.go
	if !p.isPublished(target) {
		if err := p.checkSinglePod(ctx, src, req.Pod.UID, "MountVolume.SetUp"); err != nil { // accessmode.go
			return nil, err
		}
	}
	p.rememberDir(req.Pod.UID, req.Volume.Name, filepath.Base(req.Dir))
	staging, err := p.publishOnce(ctx, c, req, src, pol, capability, target, data, publishContext)
	if err != nil {
		return nil, err
	}
	// A driver with VOLUME_MOUNT_GROUP applied the fsGroup itself.
	if mountGroup == "" && src.appliesFSGroup(req.Pod, pol.fsGroup) {
		if err := volumemgr.ApplyFSGroup(target, req.Pod, false); err != nil {
			return nil, fmt.Errorf("applying fsGroup to %s: %w", target, err)
		}
	}
	expandable, err := p.expand(ctx, c, req.Pod, src, target, staging) // expand.go
	if err != nil {
		return nil, err
	}
	relabel, err := p.needsRelabel(src, label, target)
	if err != nil {
		return nil, err
	}
	// requiresRepublish: SetUp (NodePublishVolume) again every refresh
	// period, as upstream remounts such volumes on every pod sync; a
	// volume the driver can expand is looked at again every refresh
	// period too, as upstream's populator does on every pod sync.
	return &volumemgr.SetUpResult{Path: target, ReadOnly: src.readOnly, Refresh: pol.republish || expandable, SELinuxRelabel: relabel}, nil
}

// publishOnce stages (a persistent volume) and publishes the volume at
// target, unless this process published it there already and the driver
// does not ask for republishing. It returns the staging directory of a
// staged volume, "" when there is none.
func (p *Plugin) publishOnce(ctx context.Context, c *nodeClient, req *volumemgr.SetUpRequest, src *source, pol *driverPolicy,
	capability *csipb.VolumeCapability, target string, data, publishContext map[string]string) (string, error) {
	staging := ""
	// Published by this process already and not to be republished: a
	// refresh for online expansion only (expand.go).
	if pol.republish || !p.isPublished(target) {
		if src.lifecycle == storagev1.VolumeLifecyclePersistent {
			var err error
			if staging, err = p.stage(ctx, c, src, capability, data, publishContext); err != nil {
				return "", err
			}
		}
		if err := p.publish(ctx, c, req, src, pol, capability, staging, target, data, publishContext); err != nil {
			return "", err
		}
		p.setPublished(target, true)
	} else if src.lifecycle == storagev1.VolumeLifecyclePersistent {
		if staged, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME); err == nil && staged {
			staging = p.stagingDir(src.driver, src.handle)
		}
	}
	return staging, nil
}

// volumeMountGroup is the pod's fsGroup as the driver is to apply it
// (VolumeMountGroup of the volume capability) when the driver has the
// VOLUME_MOUNT_GROUP capability, as upstream delegates it; "" otherwise,
// and the plugin applies fsGroup itself.
func volumeMountGroup(ctx context.Context, c *nodeClient, pod *v1.Pod) (string, error) {
	if pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.FSGroup == nil {
		return "", nil
	}
	ok, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP)
	if err != nil {
		return "", errors.New(logf("mounter.SetUpAt failed to determine if the node service has VOLUME_MOUNT_GROUP capability: %v", err))
	}
	if !ok {
		return "", nil
	}
	return strconv.FormatInt(*pod.Spec.SecurityContext.FSGroup, 10), nil
}

// stage calls NodeStageVolume when the driver has STAGE_UNSTAGE_VOLUME and
// returns the staging path ("" when the driver does not stage).
func (p *Plugin) stage(ctx context.Context, c *nodeClient, src *source, capability *csipb.VolumeCapability, data, publishContext map[string]string) (string, error) {
	ok, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return "", errors.New(logf("mounter.SetUpAt failed to check for STAGE_UNSTAGE_VOLUME capability: %v", err))
	}
	if !ok {
		return "", nil
	}
	dir := p.stagingDir(src.driver, src.handle)
	// Staged once per node while this process runs, as upstream's
	// MountDevice (the device globally mounted in its actual state):
	// another pod of the volume only publishes. After a restart the volume
	// is staged again, as upstream's reconstructed devices (uncertain) are.
	if p.isPublished(dir) {
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), volDataFile)); err == nil {
			if mounted, err := p.mounted(ctx, dir); err == nil && mounted {
				return dir, nil
			}
		}
	}
	secrets, err := p.secrets(ctx, "NodeStage", src.stageSecret)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("creating staging dir %s: %w", dir, err)
	}
	if err := writeVolData(filepath.Dir(dir), data); err != nil {
		return "", err
	}
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: src.handle, StagingTargetPath: dir, VolumeCapability: capability, VolumeContext: src.attributes,
		Secrets: secrets, PublishContext: publishContext,
	})
	if err != nil {
		return "", &volumemgr.StepError{Step: "MountVolume.MountDevice", Volume: data[keySpecName], Err: err}
	}
	p.setPublished(dir, true)
	return dir, nil
}

// publish calls NodePublishVolume for target, with vol_data.json written
// into req.Dir first, unless data is nil (a block volume's is elsewhere).
func (p *Plugin) publish(ctx context.Context, c *nodeClient, req *volumemgr.SetUpRequest, src *source, pol *driverPolicy,
	capability *csipb.VolumeCapability, staging, target string, data, publishContext map[string]string) error {
	secrets, err := p.secrets(ctx, "NodePublish", src.publishSecret)
	if err != nil {
		return err
	}
	if data != nil {
		if err := os.MkdirAll(req.Dir, 0o750); err != nil {
			return errors.New(logf("mounter.SetUpAt failed to create dir %#v:  %v", req.Dir, err))
		}
		if err := writeVolData(req.Dir, data); err != nil {
			return err
		}
	}
	attrs := map[string]string{}
	for k, v := range src.attributes {
		attrs[k] = v
	}
	if pol.podInfo {
		attrs["csi.storage.k8s.io/pod.name"] = req.Pod.Name
		attrs["csi.storage.k8s.io/pod.namespace"] = req.Pod.Namespace
		attrs["csi.storage.k8s.io/pod.uid"] = string(req.Pod.UID)
		attrs["csi.storage.k8s.io/serviceAccount.name"] = req.Pod.Spec.ServiceAccountName
		attrs["csi.storage.k8s.io/ephemeral"] = fmt.Sprint(src.lifecycle == storagev1.VolumeLifecycleEphemeral)
	}
	if len(pol.tokenRequests) > 0 {
		tokens, err := p.serviceAccountTokens(ctx, req.Pod, pol)
		if err != nil {
			return errors.New(logf("mounter.SetUpAt failed to get service accoount token attributes: %v", err))
		}
		if pol.tokensInSecrets {
			if secrets == nil {
				secrets = map[string]string{}
			}
			secrets[tokensKey] = tokens
		} else {
			attrs[tokensKey] = tokens
		}
	}
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: src.handle, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: capability, Readonly: src.readOnly, VolumeContext: attrs, Secrets: secrets,
		PublishContext: publishContext,
	})
	if err != nil {
		// As upstream: leave no empty target behind a failed publish.
		if mounted, merr := p.mounted(ctx, target); merr == nil && !mounted {
			_ = os.Remove(target)
		}
		return err
	}
	return nil
}

func writeVolData(dir string, data map[string]string) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, volDataFile), b, 0o640); err != nil {
		return errors.New(logf("failed to save volume info data: %v", err))
	}
	return nil
}

func readVolData(dir string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, volDataFile))
	if err != nil {
		return nil, err
	}
	data := map[string]string{}
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, volDataFile), err)
	}
	return data, nil
}

func (p *Plugin) mounted(ctx context.Context, path string) (bool, error) {
	mps, err := p.cfg.Mounter.MountPoints(ctx)
	if err != nil {
		return false, err
	}
	for _, mp := range mps {
		if mp.Path == path {
			return true, nil
		}
	}
	return false, nil
}

// removeIfUnmounted removes dir unless something is mounted on it.
func (p *Plugin) removeIfUnmounted(ctx context.Context, dir string) error {
	mounted, err := p.mounted(ctx, dir)
	if err != nil {
		return err
	}
	if mounted {
		return fmt.Errorf("%s is still mounted", dir)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

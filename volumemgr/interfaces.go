package volumemgr

import (
	"context"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// ObjectGetter reads the ConfigMaps and Secrets that configMap, secret and
// projected volumes show. A missing object must be reported with an error
// for which apierrors.IsNotFound is true (its message is shown to users, so
// `configmap "NAME" not found` as upstream); optional sources rely on it.
// podopts.Client and Client (FromClient) satisfy it.
type ObjectGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// TokenRequester asks the API server for a service-account token (the
// TokenRequest API: POST serviceaccounts/NAME/token). Client implements it.
type TokenRequester interface {
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// TokenRequesterFunc adapts a function to TokenRequester.
type TokenRequesterFunc func(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)

// CreateToken calls f.
func (f TokenRequesterFunc) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return f(ctx, namespace, serviceAccount, req)
}

// EventRecorder records events about pods; client-go's record.EventRecorder
// fits.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

type discardEvents struct{}

func (discardEvents) Eventf(runtime.Object, string, string, string, ...interface{}) {}

// Mounter changes and reads the host's mount table. HostMounter is the real
// one (mount(2), umount(2), /proc/self/mountinfo); tests use a fake.
type Mounter interface {
	// Mount mounts source on target. fstype is "tmpfs" for memory-backed
	// volumes or "" for a bind mount; options are mount(8)-style words:
	// "bind", "ro", "nosuid", "nodev", "noexec", or "key=value" data such
	// as "size=1048576".
	Mount(ctx context.Context, source, target, fstype string, options []string) error
	// Unmount unmounts the file system mounted on target (the topmost one
	// if several are stacked).
	Unmount(ctx context.Context, target string) error
	// MountPoints lists the mount table, in mount order. The result belongs
	// to the caller.
	MountPoints(ctx context.Context) ([]MountPoint, error)
}

// MountPoint is one line of the mount table.
type MountPoint struct {
	// Path is where the file system is mounted, unescaped.
	Path string
	// Type is the file system type, e.g. "tmpfs".
	Type string
	// Source is the mounted device or "none".
	Source string
}

// Plugin sets up and tears down one kind of volume. The Manager picks the
// first plugin whose CanSupport accepts a pod volume (Config.Plugins before
// the built-in ones) and calls it from the reconciler, never concurrently for
// the same volume. A plugin that needs an API client, a node-global mount
// (for example a future CSI plugin doing NodeStage and NodePublish inside
// SetUp) or its own state brings it in its constructor; callers do not
// change.
type Plugin interface {
	// Name is the upstream plugin name, e.g. "kubernetes.io/configmap". Its
	// escaped form ("kubernetes.io~configmap") names the directory that
	// holds the plugin's volumes under ROOT/pods/UID/volumes, and is how
	// volumes found on disk after a restart are matched to their plugin.
	Name() string
	// CanSupport reports whether the plugin handles vol.
	CanSupport(vol *v1.Volume) bool
	// SetUp makes the volume ready for containers and returns where it is.
	// It is called once to mount the volume and then again to refresh it
	// when the result asked for it (content that follows API objects), and
	// after an agent restart: it must be idempotent and keep what is
	// already right. It blocks on the API server and the file system.
	SetUp(ctx context.Context, req *SetUpRequest) (*SetUpResult, error)
	// TearDown removes what SetUp made: it unmounts req.Dir if it is a
	// mount point and removes it, unless something is still mounted below
	// it. It must succeed when there is nothing left to remove. req.Volume
	// is nil for a volume found on disk at start-up whose pod the agent no
	// longer knows.
	TearDown(ctx context.Context, req *TearDownRequest) error
}

// SELinux is the host's SELinux as volumes need it. internal/selinux.Host
// is the real one (github.com/opencontainers/selinux); on a host without
// SELinux Enabled is false and the others are not called.
type SELinux interface {
	// Enabled reports whether SELinux is enabled on the host.
	Enabled() bool
	// FileLabel returns the file label of a process with opts, "" for
	// nil or empty opts.
	FileLabel(opts *v1.SELinuxOptions) (string, error)
	// SupportsLabels reports whether the file system path is on keeps
	// SELinux labels (seclabel); false when SELinux is disabled.
	SupportsLabels(path string) (bool, error)
}

// RecursiveReadOnlyChecker tells whether the runtime handler a pod runs
// with supports recursive read-only mounts (CRI Status,
// runtime_handlers[].features.recursive_read_only_mounts).
type RecursiveReadOnlyChecker interface {
	SupportsRecursiveReadOnly(ctx context.Context, pod *v1.Pod) bool
}

// DirNamer is a Plugin whose volume directories are not all named by the
// pod volume: upstream names a volume's directory by its volume spec, which
// for a claim is the bound PV (POD/volumes/kubernetes.io~csi/PV). The
// Manager asks once per volume, before its first SetUp, and passes
// PodDir/volumes/ESCAPED-PLUGIN/NAME as SetUpRequest.Dir; "" keeps the pod
// volume's name. An error fails the set-up as a SetUp error does. A volume
// found on disk in that directory after a restart is then the same volume
// (it is set up again, not torn down).
type DirNamer interface {
	VolumeDirName(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (string, error)
}

// SetUpRequest is the input of Plugin.SetUp. Fields may be added.
type SetUpRequest struct {
	Pod    *v1.Pod
	Volume *v1.Volume
	// PodDir is ROOT/pods/UID.
	PodDir string
	// Dir is the volume's directory, PodDir/volumes/ESCAPED-PLUGIN/NAME,
	// NAME the pod volume's or the one a DirNamer gave. Plugins that keep
	// no files (hostPath) ignore it.
	Dir string
	// SELinuxLabel, on a host with SELinux enabled, is the file label
	// the containers that mount the volume run with (one, or the pod's
	// volumes fail before SetUp), "" when they have none, when the pod's
	// seLinuxChangePolicy is Recursive, or on a host without SELinux. A
	// plugin that can mount with it (a CSI driver with seLinuxMount) mounts
	// a PV-backed volume with -o context="LABEL"; the others ignore it.
	SELinuxLabel string
}

// SetUpResult is the output of Plugin.SetUp. Fields may be added.
type SetUpResult struct {
	// Path is the host path containers mount; "" means SetUpRequest.Dir.
	Path string
	// ReadOnly forces read-only container mounts (configMap, secret,
	// downwardAPI and projected volumes, as upstream).
	ReadOnly bool
	// Refresh asks for SetUp to be called again every refresh period while
	// the volume is mounted, so that its content follows the API objects.
	Refresh bool
	// RefreshBy, when set, asks for the next refresh no later than this
	// time (a token that reaches 80% of its lifetime).
	RefreshBy time.Time
	// Device, for a raw block volume (a PV of volumeMode Block), is the
	// host path of the device file that containers naming the volume in
	// volumeDevices are given (ContainerDevices); "" for a file system
	// volume. A block volume cannot be in volumeMounts, nor a file system
	// volume in volumeDevices: the Manager fails such a set-up with
	// upstream's message.
	Device string
	// SELinuxRelabel asks the container runtime to relabel the volume for
	// each container that mounts it (nodekit.Mount.SELinuxRelabel; CRI
	// selinux_relabel, sent only on a host with SELinux enabled): upstream's
	// volume attributes Managed and SELinuxRelabel both true. emptyDir,
	// configMap, secret, downwardAPI and projected volumes set it; hostPath
	// and image volumes do not; a CSI volume does when it is writable, on a
	// file system with seclabel and not mounted with -o context.
	SELinuxRelabel bool
}

// TearDownRequest is the input of Plugin.TearDown. Fields may be added.
type TearDownRequest struct {
	PodUID types.UID
	// Volume is the pod volume, or nil when the volume was found on disk
	// and its pod is unknown.
	Volume *v1.Volume
	// VolumeName is the volume's name (the last element of Dir), or, for
	// a raw block volume found on disk, DeviceVolumePrefix and the name of
	// its entry.
	VolumeName string
	PodDir     string
	// Dir is the volume's directory (SetUpRequest.Dir), or, for a raw
	// block volume found on disk, its entry POD/volumeDevices/PLUGIN/NAME
	// (upstream's pod device map path, a link).
	Dir string
}

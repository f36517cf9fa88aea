package criruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/utils/clock"
	utilexec "k8s.io/utils/exec"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/selinux"
)

// EventRecorder records Kubernetes events about a pod. client-go's
// record.EventRecorder satisfies it.
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{})
}

// CredentialLookup gives registry credentials for an image repository
// (fully qualified, without tag or digest) pulled for pod, in the order
// to try them. It may block (a plugin runs); a failure gives none.
type CredentialLookup interface {
	Lookup(ctx context.Context, image string, pod *v1.Pod) []*runtimeapi.AuthConfig
}

// Config configures a Runtime. Only Endpoint is required.
type Config struct {
	// Endpoint is the CRI socket, e.g. unix:///run/containerd/containerd.sock.
	Endpoint string
	// ImageEndpoint is the image service socket; "" means Endpoint.
	ImageEndpoint string
	// RequestTimeout bounds each CRI call except image pulls. Default 2m.
	RequestTimeout time.Duration
	// PodLogsDir is where container logs are written, one directory per
	// pod (NAMESPACE_NAME_UID). Default /var/log/pods.
	PodLogsDir string
	// Events receives Pulling, Pulled, Created, Started, Killing and failure
	// events. Nil discards them.
	Events EventRecorder
	// Clock is used for timestamps, pull durations and the pull rate
	// limit. Default: the real clock.
	Clock clock.PassiveClock

	// SerializeImagePulls pulls one image at a time, in the order the pulls
	// were asked for (upstream's serializeImagePulls). Nil means as
	// upstream's default: true, unless MaxParallelImagePulls is 2 or more.
	SerializeImagePulls *bool
	// MaxParallelImagePulls bounds the pulls in progress at once when pulls
	// are not serialized; 0 means no limit. With SerializeImagePulls true
	// it must be 0 or 1.
	MaxParallelImagePulls int
	// PullQPS is how many image pulls may start per second (upstream's
	// registryPullQPS); 0 means no limit. A pull over the limit fails at
	// once with ErrPullQPSExceeded ("pull QPS exceeded"), as upstream: it
	// does not wait, the caller's image pull back-off retries it.
	PullQPS float32
	// PullBurst is how many pulls may start at once within PullQPS
	// (upstream's registryBurst). Used only when PullQPS > 0; 0 means 1.
	PullBurst int
	// PullDeadline bounds each image pull from the moment it starts (time
	// spent waiting for a turn does not count); 0 means no deadline. CRI
	// PullImage is one call that reports no progress, so this is an
	// overall deadline: a pull that exceeds it fails with "image pull of
	// IMAGE exceeded deadline D".
	PullDeadline time.Duration
	// MaxParallelSandboxCreations bounds the RunPodSandbox calls in
	// progress at once; a pod over the bound waits its turn. 0 means no
	// bound, as upstream kubelet (every pod worker calls at once);
	// negative is an error. On a small machine a burst of new pods runs
	// sooner with a bound: each sandbox starts processes and a CNI ADD,
	// and a hundred at once share the CPUs until all finish late. A call
	// still in progress 5s after it started stops counting against the
	// bound (it goes on), so one hung in its CNI plugin holds the others
	// back for 5s at most. Timers run on Clock when it has AfterFunc,
	// else on the real clock.
	MaxParallelSandboxCreations int
	// Credentials, when set, gives registry credentials for the images
	// to pull beyond the pod's pull secrets: kubelet's credential
	// provider plugins (package credentialprovider's Keyring). They are
	// tried after the secrets' that match, as upstream.
	Credentials CredentialLookup
	// PullRecords, when set, verifies pull credentials for images already
	// on the node (KubeletEnsureSecretPulledImages): a pod with pull
	// policy IfNotPresent or Never uses a present image only when
	// PullRecords.MustPull says so; otherwise it pulls with its own
	// credentials, or with Never fails with ErrImageNeverPull. Every pull
	// is recorded. Nil: a present image is used by any pod.
	PullRecords PullRecords

	// RootDir is the agent's root directory (kubelet's --root-dir).
	// Localhost seccomp profiles are read from RootDir/seccomp, and the
	// user namespace range of each pod with hostUsers: false is
	// checkpointed in RootDir/pods/UID/userns. Default /var/lib/kubelet.
	RootDir string
	// SeccompDefault gives a container that names no seccomp profile (on
	// itself or its pod) the runtime's default profile instead of none
	// (KubeletConfiguration seccompDefault).
	SeccompDefault bool
	// UserNamespaceIDsPerPod is how many UIDs and GIDs each pod with
	// hostUsers: false gets (KubeletConfiguration userNamespaces.idsPerPod):
	// a multiple of 65536 below 2^32; 0 means 65536. New refuses other
	// values, naming the field.
	UserNamespaceIDsPerPod int64
	// UserNamespaceFirstID and UserNamespaceLength are the node's host ID
	// range the pods' ranges are taken from (userns.NodeRange finds it as
	// upstream does, from the kubelet user's subordinate IDs). Both 0 means
	// upstream's default: every ID from UserNamespaceIDsPerPod to 2^32-1.
	UserNamespaceFirstID, UserNamespaceLength uint32
	// UserNamespaceMaxPods, when above 0, is how many pods the range must
	// hold (maxPods). New refuses a range upstream would refuse
	// (userns.Config.Validate), naming the IDs.
	UserNamespaceMaxPods int
	// DisableCPUCFSQuota is upstream's cpuCFSQuota: false. Containers get
	// no CFS quota: a CPU limit sets neither CpuQuota nor CpuPeriod, at
	// creation or on an in-place resize, so the runtime leaves the
	// container's quota unlimited, as kubelet does.
	DisableCPUCFSQuota bool
	// SELinux tells whether SELinux is enabled on the host; nil asks the
	// host (github.com/opencontainers/selinux). Only then do container
	// mounts carry CRI selinux_relabel: the mounts that ask for it
	// (nodekit.Mount.SELinuxRelabel) and the termination-message file, as
	// upstream.
	SELinux SELinuxHost

	// Metrics receives upstream's runtime numbers: each CRI call
	// (kubelet_runtime_operations_*), image pulls, and sandbox and
	// container starts. Nil discards them.
	Metrics Metrics
	// TracerProvider, when set, traces every CRI call New makes: a gRPC
	// client span per call (runtime.v1.RuntimeService/RunPodSandbox,
	// ...), a child of the span in the call's context, with the trace
	// context sent to the runtime, as upstream's CRI client. Nil traces
	// nothing and installs no interceptor. NewFromServices ignores it.
	TracerProvider trace.TracerProvider
}

// Runtime is a nodekit.Runtime over a CRI endpoint. Its methods are safe for
// concurrent use.
type Runtime struct {
	rs      internalapi.RuntimeService
	is      internalapi.ImageManagerService
	cfg     Config
	typ     string
	events  EventRecorder
	metrics Metrics
	pulls   *puller // pull.go

	sandboxes *sandboxGate // sandboxgate.go: Config.MaxParallelSandboxCreations

	// imageVolumeErr says why the runtime cannot mount image volumes; nil
	// when it can (imagevolume.go).
	imageVolumeErr error

	security securityPolicy // security.go
	userns   *usernsState   // namespaces.go

	logMu    sync.Mutex        // logs.go
	logPaths map[string]string // running containers' log files, by CRI ID, from their status

	nodeMu       sync.Mutex // nodestatus.go: the last features the runtime reported
	nodeKnown    bool
	nodeFeatures *v1.NodeFeatures
	nodeHandlers []v1.NodeRuntimeHandler
}

var _ nodekit.Runtime = (*Runtime)(nil)

// New connects to the CRI endpoint and checks that it answers. It fails with
// an error naming the endpoint when the socket is dead, so a misconfigured
// agent stops at start instead of spinning.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Endpoint == "" {
		return nil, fmt.Errorf("criruntime: Config.Endpoint is empty")
	}
	cfg = withDefaults(cfg)
	if _, err := newPuller(cfg); err != nil { // bad pull settings: fail before connecting
		return nil, err
	}
	if err := checkMaxSandboxCreations(cfg.MaxParallelSandboxCreations); err != nil {
		return nil, err
	}
	rs, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(cfg.Endpoint).
		WithConnectionTimeout(cfg.RequestTimeout).
		WithTracerProvider(cfg.TracerProvider).
		Build(ctx)
	if err != nil {
		return nil, fmt.Errorf("criruntime: connect to runtime endpoint %q: %w", cfg.Endpoint, err)
	}
	ie := cfg.ImageEndpoint
	if ie == "" {
		ie = cfg.Endpoint
	}
	is, err := remote.NewRemoteImageServiceBuilder().
		WithEndpoint(ie).
		WithConnectionTimeout(cfg.RequestTimeout).
		WithTracerProvider(cfg.TracerProvider).
		Build(ctx)
	if err != nil {
		_ = rs.Close(ctx)
		return nil, fmt.Errorf("criruntime: connect to image endpoint %q: %w", ie, err)
	}
	return NewFromServices(ctx, rs, is, cfg)
}

// NewFromServices builds a Runtime over already connected CRI services (for
// example the fakes in k8s.io/cri-api/pkg/apis/testing). It asks the runtime
// for its name, used as the container ID type.
func NewFromServices(ctx context.Context, rs internalapi.RuntimeService, is internalapi.ImageManagerService, cfg Config) (*Runtime, error) {
	cfg = withDefaults(cfg)
	pulls, err := newPuller(cfg)
	if err != nil {
		return nil, err
	}
	if err := validIDsPerPod(cfg.UserNamespaceIDsPerPod); err != nil {
		return nil, err
	}
	if err := checkMaxSandboxCreations(cfg.MaxParallelSandboxCreations); err != nil {
		return nil, err
	}
	sandboxes := newSandboxGate(cfg.MaxParallelSandboxCreations, timers(cfg.Clock))
	if err := usernsConfig(cfg).Validate(); err != nil {
		// As kubelet, at start rather than at the first pod that asks.
		return nil, fmt.Errorf("criruntime: create user namespace manager: %w", err)
	}
	var metrics Metrics = noMetrics{}
	if cfg.Metrics != nil {
		metrics = cfg.Metrics
		t := timer{m: metrics, clk: cfg.Clock}
		rs, is = timedRuntime{RuntimeService: rs, t: t}, timedImages{ImageManagerService: is, t: t}
	}
	v, err := rs.Version(ctx, "v1")
	if err != nil {
		return nil, fmt.Errorf("criruntime: runtime at %q does not answer Version: %w", cfg.Endpoint, err)
	}
	r := &Runtime{rs: rs, is: is, cfg: cfg, typ: v.RuntimeName, events: cfg.Events, metrics: metrics, pulls: pulls, sandboxes: sandboxes,
		imageVolumeErr: imageVolumeSupport(v.RuntimeName, v.RuntimeVersion),
		security:       securityPolicy{seccompRoot: filepath.Join(cfg.RootDir, "seccomp"), seccompDefault: cfg.SeccompDefault, maskedPaths: hostMaskedPaths()},
		userns:         &usernsState{cfg: usernsConfig(cfg)},
	}
	if r.events == nil {
		r.events = discardEvents{}
	}
	return r, nil
}

func withDefaults(cfg Config) Config {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 2 * time.Minute
	}
	if cfg.PodLogsDir == "" {
		cfg.PodLogsDir = "/var/log/pods"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RootDir == "" {
		cfg.RootDir = "/var/lib/kubelet"
	}
	if cfg.SELinux == nil {
		cfg.SELinux = selinux.Host{}
	}
	return cfg
}

// timers is clk when it can run functions after a delay, else the real
// clock.
func timers(clk clock.PassiveClock) clock.WithDelayedExecution {
	if c, ok := clk.(clock.WithDelayedExecution); ok {
		return c
	}
	return clock.RealClock{}
}

// SELinuxHost reports whether SELinux is enabled on the host.
type SELinuxHost interface {
	Enabled() bool
}

// SELinuxHostFunc adapts a function to SELinuxHost.
type SELinuxHostFunc func() bool

// Enabled calls f.
func (f SELinuxHostFunc) Enabled() bool { return f() }

// Close releases the connections.
func (r *Runtime) Close(ctx context.Context) error {
	err := r.rs.Close(ctx)
	if ierr := r.is.Close(ctx); err == nil {
		err = ierr
	}
	return err
}

// Type is the runtime's name as reported by CRI Version (e.g. "containerd"),
// used as the scheme of container IDs.
func (r *Runtime) Type() string { return r.typ }

// Version reports the runtime's name and version, e.g. for the Node's
// status.nodeInfo.containerRuntimeVersion ("containerd://1.6.20").
func (r *Runtime) Version(ctx context.Context) (string, error) {
	v, err := r.rs.Version(ctx, "v1")
	if err != nil {
		return "", fmt.Errorf("criruntime: version: %w", err)
	}
	return v.RuntimeName + "://" + v.RuntimeVersion, nil
}

// SandboxImage returns the image the runtime starts pod sandboxes from
// (containerd's sandbox_image, from the runtime's verbose status), so
// image garbage collection can pin it. "" when the runtime does not say:
// containerd 2 does not, and marks the image pinned in ListImages
// (Image.pinned) instead, which image GC honours.
func (r *Runtime) SandboxImage(ctx context.Context) (string, error) {
	st, err := r.rs.Status(ctx, true)
	if err != nil {
		return "", fmt.Errorf("criruntime: status: %w", err)
	}
	raw, ok := st.GetInfo()["config"]
	if !ok {
		return "", nil
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return "", fmt.Errorf("criruntime: runtime status config: %w", err)
	}
	return cfg.SandboxImage, nil
}

// Ready reports whether the runtime and its network are ready, with the
// runtime's reason when not.
func (r *Runtime) Ready(ctx context.Context) error {
	st, err := r.rs.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("%w: %w", nodekit.ErrRuntimeUnavailable, err)
	}
	for _, c := range st.GetStatus().GetConditions() {
		if (c.Type == runtimeapi.RuntimeReady || c.Type == runtimeapi.NetworkReady) && !c.Status {
			return fmt.Errorf("%w: %s is false: %s: %s", nodekit.ErrRuntimeUnavailable, c.Type, c.Reason, c.Message)
		}
	}
	return nil
}

// ExecSync runs cmd in a container and returns its output and exit code. A
// non-zero exit is not an error; a timeout is.
func (r *Runtime) ExecSync(ctx context.Context, id nodekit.ContainerID, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error) {
	stdout, stderr, err = r.rs.ExecSync(ctx, id.ID, cmd, timeout)
	if err != nil {
		var ee utilexec.ExitError
		if errors.As(err, &ee) {
			return stdout, stderr, ee.ExitStatus(), nil
		}
		return stdout, stderr, -1, fmt.Errorf("criruntime: exec in %s: %w", id, err)
	}
	return stdout, stderr, 0, nil
}

// RemoveContainer removes a stopped container and its log file.
func (r *Runtime) RemoveContainer(ctx context.Context, id nodekit.ContainerID) error {
	if err := r.rs.RemoveContainer(ctx, id.ID); err != nil {
		return fmt.Errorf("criruntime: remove container %s: %w", id, err)
	}
	return nil
}

// RemovePodSandbox removes a stopped sandbox and whatever containers remain
// in it.
func (r *Runtime) RemovePodSandbox(ctx context.Context, id string) error {
	if err := r.rs.RemovePodSandbox(ctx, id); err != nil {
		return fmt.Errorf("criruntime: remove sandbox %s: %w", id, err)
	}
	return nil
}

// podLogDir is the directory of a pod's container logs, as upstream:
// PodLogsDir/NAMESPACE_NAME_UID.
func (r *Runtime) podLogDir(pod *v1.Pod) string {
	return filepath.Join(r.cfg.PodLogsDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

func (r *Runtime) containerID(id string) nodekit.ContainerID {
	return nodekit.ContainerID{Type: r.typ, ID: id}
}

type discardEvents struct{}

func (discardEvents) Eventf(runtime.Object, string, string, string, ...interface{}) {}

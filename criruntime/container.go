package criruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/internal/expansion"
)

// startContainer pulls the image, creates and starts one container in the
// sandbox. Failures come back as *nodekit.ActionError.
func (r *Runtime) startContainer(ctx context.Context, req *syncState, c *v1.Container, init bool) error {
	return r.startContainerIn(ctx, req, c, init, "")
}

// targetID is the ID of the running container an ephemeral container
// targets (shares the process namespace of), "" for none.
func targetID(st *nodekit.PodStatus, name string) string {
	if name == "" {
		return ""
	}
	if st == nil {
		return ""
	}
	for _, c := range st.Containers {
		if c.Name == name && c.State == nodekit.StateRunning {
			return c.ID.ID
		}
	}
	return ""
}

// startContainerIn starts c; with a target, in that container's process
// namespace (an ephemeral container's targetContainerName).
func (r *Runtime) startContainerIn(ctx context.Context, req *syncState, c *v1.Container, init bool, target string) (err error) {
	pod := req.Pod
	defer func() { r.metrics.StartedContainer(containerType(isEphemeral(pod), c.Name, init), failureReason(err)) }()
	action := nodekit.ActionStartContainer
	if init {
		action = nodekit.ActionInitContainer
	}
	fail := func(reason nodekit.Reason, err error) error {
		msg := err.Error()
		// As upstream, a runtime's refusal shows as its gRPC status message
		// ("failed to mount image volume: ..."), without "rpc error: code
		// = Unknown desc = ".
		if s, ok := grpcstatus.FromError(err); ok && s.Code() != codes.OK {
			msg = s.Message()
		}
		r.events.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %s", msg)
		return &nodekit.ActionError{Action: action, Target: c.Name, Reason: reason, Message: msg, Err: err}
	}
	// As upstream, the pod's image volumes come first: a container that
	// mounts one whose image is missing fails with that pull.
	if err := r.checkImageVolumes(ctx, req, c, action); err != nil {
		return err
	}
	defer func() { r.countImageVolumeMounts(req, c, err) }()
	if ae := r.pullFailedThisSync(req, c, action); ae != nil {
		return ae
	}
	img, err := r.ensureImage(ctx, pod, c, req.PullSecrets, req.SandboxConfig)
	if err != nil {
		req.notePullFailure(c.Image, err)
		return err
	}

	restartCount := 0
	if prev := req.Status.FindContainer(c.Name); prev != nil {
		restartCount = prev.RestartCount + 1
	}
	// Never overwrite the log of an earlier attempt, even when its container
	// was already removed (as upstream does after garbage collection).
	for {
		if _, err := os.Stat(filepath.Join(req.SandboxConfig.LogDirectory, c.Name, strconv.Itoa(restartCount)+".log")); err != nil {
			break
		}
		restartCount++
	}

	var opts *nodekit.ContainerOptions
	if req.Options != nil {
		opts, err = req.Options(ctx, pod, c, req.PodIPs)
		if err != nil {
			return fail(nodekit.ErrCreateContainerConfig, err)
		}
	}
	if opts == nil {
		opts = &nodekit.ContainerOptions{}
	}
	cfg, err := r.containerConfig(pod, c, img, restartCount, opts, req.SandboxConfig.GetLinux().GetSecurityContext().GetNamespaceOptions(), req.imageVolumes)
	if err != nil {
		return fail(nodekit.ErrCreateContainerConfig, err)
	}
	if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(); target != "" && ns != nil {
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, target
	}
	if err := os.MkdirAll(filepath.Join(req.SandboxConfig.LogDirectory, c.Name), 0o755); err != nil {
		return fail(nodekit.ErrCreateContainer, fmt.Errorf("create log directory: %w", err))
	}
	id, err := r.rs.CreateContainer(ctx, req.SandboxID, cfg, req.SandboxConfig)
	if err != nil {
		return fail(nodekit.ErrCreateContainer, err)
	}
	r.events.Eventf(pod, v1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	if err := r.rs.StartContainer(ctx, id); err != nil {
		return fail(nodekit.ErrRunContainer, err)
	}
	r.events.Eventf(pod, v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	return nil
}

// containerConfig builds the CRI config of one container.
// imageVolumes are the pod's pulled image volumes, for mounts naming one.
func (r *Runtime) containerConfig(pod *v1.Pod, c *v1.Container, img *runtimeapi.Image, restartCount int, opts *nodekit.ContainerOptions, sandboxNamespaces *runtimeapi.NamespaceOption, imageVolumes map[string]imageVolume) (*runtimeapi.ContainerConfig, error) {
	// The container joins the sandbox's namespaces (user namespace
	// included); a copy, as an ephemeral container may retarget its PID
	// namespace.
	var ns *runtimeapi.NamespaceOption
	if sandboxNamespaces != nil {
		ns = proto.Clone(sandboxNamespaces).(*runtimeapi.NamespaceOption)
	}
	sc, err := containerSecurityContext(pod, c, img, ns, r.security)
	if err != nil {
		return nil, err
	}
	annotations, err := containerAnnotations(pod, c, restartCount, opts.Annotations)
	if err != nil {
		return nil, err
	}
	env := make(map[string]string, len(opts.Envs))
	envs := make([]*runtimeapi.KeyValue, 0, len(opts.Envs))
	for _, e := range opts.Envs {
		env[e.Name] = e.Value
		envs = append(envs, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: img.GetId(), UserSpecifiedImage: c.Image},
		Command:     expandAll(c.Command, env),
		Args:        expandAll(c.Args, env),
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Labels:      containerLabels(pod, c),
		Annotations: annotations,
		LogPath:     filepath.Join(c.Name, strconv.Itoa(restartCount)+".log"),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       r.containerResources(pod, c, opts),
			SecurityContext: sc,
		},
	}
	relabel := r.cfg.SELinux.Enabled()
	for _, m := range opts.Mounts {
		if m.Image != "" {
			im, err := imageMount(m, imageVolumes)
			if err != nil {
				return nil, err
			}
			cfg.Mounts = append(cfg.Mounts, im)
			continue
		}
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{
			ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.ReadOnly,
			RecursiveReadOnly: m.RecursiveReadOnly, Propagation: propagationOf(m.Propagation),
			SelinuxRelabel: m.SELinuxRelabel && relabel,
		})
	}
	for _, d := range opts.Devices {
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.PathInContainer, HostPath: d.PathOnHost, Permissions: d.Permissions})
	}
	// CDI devices (DRA claims, device plugins returning CDI names) go in
	// the config's CDI_devices, as upstream; the container runtime applies
	// their specs (containerd: enable_cdi, cdi_spec_dirs).
	for _, name := range opts.CDIDevices {
		cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: name})
	}
	if opts.PodContainerDir != "" && c.TerminationMessagePath != "" {
		hostPath, err := terminationLogFile(filepath.Join(opts.PodContainerDir, c.Name))
		if err != nil {
			return nil, err
		}
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: hostPath, SelinuxRelabel: relabel})
	}
	idmapMounts(cfg.Mounts, ns.GetUsernsOptions())
	return cfg, nil
}

// idmapMounts gives every mount of a container in a user namespace of the
// pod's own (hostUsers: false) the namespace's ID mappings, as upstream
// does: the runtime then makes idmapped bind mounts, so files the agent
// wrote on the host as root (volumes, /etc/hosts, the termination log) are
// owned by the pod's root inside, not by the overflow ID.
func idmapMounts(mounts []*runtimeapi.Mount, userns *runtimeapi.UserNamespace) {
	if userns.GetMode() != runtimeapi.NamespaceMode_POD {
		return
	}
	for _, m := range mounts {
		m.UidMappings, m.GidMappings = userns.GetUids(), userns.GetGids()
	}
}

// terminationLogFile creates an empty, world-writable file for the container
// to leave its termination message in; each attempt gets a new one.
func terminationLogFile(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("create termination message dir: %w", err)
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("termination message file name: %w", err)
	}
	p := filepath.Join(dir, hex.EncodeToString(b[:]))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o666)
	if err != nil {
		return "", fmt.Errorf("create termination message file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	// The container may run as any user; umask must not narrow the mode.
	if err := os.Chmod(p, 0o666); err != nil {
		return "", err
	}
	return p, nil
}

func propagationOf(p *v1.MountPropagationMode) runtimeapi.MountPropagation {
	if p == nil {
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
	}
	switch *p {
	case v1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	case v1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	}
	return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
}

// expandAll expands $(VAR) references in each string, as upstream does for
// command and args: $$ is a literal $, unknown references stay as written.
func expandAll(in []string, env map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expansion.Expand(s, env)
	}
	return out
}

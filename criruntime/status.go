package criruntime

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit"
)

// How much of the log a FallbackToLogsOnError message takes, as upstream.
const (
	maxFallbackLines = 80
	maxFallbackBytes = 2048
)

// maxTerminationMessage is how much of a termination-message file is read,
// as upstream.
const maxTerminationMessage = 4096

// ListPods implements nodekit.Runtime.
func (r *Runtime) ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error) {
	var sf *runtimeapi.PodSandboxFilter
	var cf *runtimeapi.ContainerFilter
	if !all {
		sf = &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}
		cf = &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
	}
	sandboxes, err := r.rs.ListPodSandbox(ctx, sf)
	if err != nil {
		return nil, fmt.Errorf("criruntime: list sandboxes: %w", err)
	}
	containers, err := r.rs.ListContainers(ctx, cf)
	if err != nil {
		return nil, fmt.Errorf("criruntime: list containers: %w", err)
	}
	pods := map[types.UID]*nodekit.Pod{}
	get := func(uid types.UID, name, ns string) *nodekit.Pod {
		p, ok := pods[uid]
		if !ok {
			p = &nodekit.Pod{ID: uid, Name: name, Namespace: ns}
			pods[uid] = p
		}
		return p
	}
	for _, sb := range sandboxes {
		uid := podUIDOf(sb.Labels)
		if uid == "" {
			continue // not created by a kubelet
		}
		p := get(uid, sb.GetMetadata().GetName(), sb.GetMetadata().GetNamespace())
		created := nanoTime(sb.CreatedAt)
		if created.After(p.CreatedAt) {
			p.CreatedAt = created
		}
		state := nodekit.StateExited
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			state = nodekit.StateRunning
		}
		p.Sandboxes = append(p.Sandboxes, &nodekit.Container{ID: r.containerID(sb.Id), State: state, CreatedAt: created})
	}
	for _, c := range containers {
		uid := podUIDOf(c.Labels)
		if uid == "" {
			continue
		}
		p := get(uid, c.Labels[labelPodName], c.Labels[labelPodNamespace])
		p.Containers = append(p.Containers, &nodekit.Container{
			ID:        r.containerID(c.Id),
			Name:      c.Labels[labelContainerName],
			Image:     c.GetImage().GetUserSpecifiedImage(),
			ImageID:   c.ImageId,
			ImageRef:  c.ImageRef,
			Hash:      parseUint(c.Annotations[annotationHash]),
			State:     stateOf(c.State),
			CreatedAt: nanoTime(c.CreatedAt),
		})
	}
	out := make([]*nodekit.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// GetPodStatus implements nodekit.Runtime.
func (r *Runtime) GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*nodekit.PodStatus, error) {
	now := r.cfg.Clock.Now()
	sandboxes, err := r.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}})
	if err != nil {
		return nil, fmt.Errorf("criruntime: list sandboxes of pod %s/%s: %w", namespace, name, err)
	}
	ps := &nodekit.PodStatus{ID: uid, Name: name, Namespace: namespace, TimeStamp: now}
	sort.Slice(sandboxes, func(i, j int) bool { return sandboxes[i].CreatedAt > sandboxes[j].CreatedAt })
	for i, sb := range sandboxes {
		resp, err := r.rs.PodSandboxStatus(ctx, sb.Id, false)
		if err != nil {
			return nil, fmt.Errorf("criruntime: status of sandbox %s: %w", sb.Id, err)
		}
		s := resp.GetStatus()
		st := &nodekit.SandboxStatus{
			ID:          s.Id,
			State:       nodekit.SandboxNotReady,
			CreatedAt:   nanoTime(s.CreatedAt),
			Attempt:     s.GetMetadata().GetAttempt(),
			HostNetwork: s.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE,
		}
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			st.State = nodekit.SandboxReady
		}
		if !st.HostNetwork {
			st.IPs = sandboxIPs(s)
		}
		if i == 0 {
			ps.IPs = st.IPs
		}
		ps.Sandboxes = append(ps.Sandboxes, st)
	}

	containers, err := r.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: string(uid)}})
	if err != nil {
		return nil, fmt.Errorf("criruntime: list containers of pod %s/%s: %w", namespace, name, err)
	}
	for _, c := range containers {
		resp, err := r.rs.ContainerStatus(ctx, c.Id, false)
		if err != nil {
			return nil, fmt.Errorf("criruntime: status of container %s: %w", c.Id, err)
		}
		if s := resp.GetStatus(); s != nil {
			ps.Containers = append(ps.Containers, r.containerStatus(s))
		}
	}
	sort.SliceStable(ps.Containers, func(i, j int) bool { return ps.Containers[i].CreatedAt.After(ps.Containers[j].CreatedAt) })
	return ps, nil
}

func (r *Runtime) containerStatus(s *runtimeapi.ContainerStatus) *nodekit.ContainerStatus {
	cs := &nodekit.ContainerStatus{
		ID:           r.containerID(s.Id),
		Name:         s.Labels[labelContainerName],
		State:        stateOf(s.State),
		CreatedAt:    nanoTime(s.CreatedAt),
		StartedAt:    nanoTime(s.StartedAt),
		FinishedAt:   nanoTime(s.FinishedAt),
		ExitCode:     int(s.ExitCode),
		Image:        s.GetImage().GetUserSpecifiedImage(),
		ImageID:      s.ImageId,
		ImageRef:     s.ImageRef,
		Hash:         parseUint(s.Annotations[annotationHash]),
		RestartCount: parseInt(s.Annotations[annotationRestartCount]),
		Reason:       s.Reason,
		Message:      s.Message,
		LogPath:      s.LogPath,
	}
	if cs.Image == "" {
		cs.Image = s.GetImage().GetImage()
	}
	if u := s.GetUser(); u != nil {
		// As upstream: a user without its Linux part is still reported.
		cs.User = &v1.ContainerUser{}
		if l := u.GetLinux(); l != nil {
			cs.User.Linux = &v1.LinuxContainerUser{UID: l.GetUid(), GID: l.GetGid(), SupplementalGroups: l.GetSupplementalGroups()}
		}
	}
	if cs.Name == "" {
		cs.Name = s.GetMetadata().GetName()
	}
	if cs.State == nodekit.StateExited && cs.Message == "" {
		cs.Message = terminationMessage(s)
		if cs.Message == "" && cs.ExitCode != 0 && s.Annotations[annotationTerminationMessagePolicy] == "FallbackToLogsOnError" {
			cs.Message = logTail(s.LogPath, maxFallbackLines, maxFallbackBytes)
		}
	}
	return cs
}

// terminationMessage reads the file mounted at the container's termination
// message path, if it has one.
func terminationMessage(s *runtimeapi.ContainerStatus) string {
	path := s.Annotations[annotationTerminationMessagePath]
	if path == "" {
		return ""
	}
	for _, m := range s.Mounts {
		if m.ContainerPath != path {
			continue
		}
		f, err := os.Open(m.HostPath)
		if err != nil {
			return ""
		}
		defer f.Close()
		buf := make([]byte, maxTerminationMessage)
		n, _ := f.Read(buf)
		return string(buf[:n])
	}
	return ""
}

func stateOf(s runtimeapi.ContainerState) nodekit.State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return nodekit.StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return nodekit.StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return nodekit.StateExited
	}
	return nodekit.StateUnknown
}

// logTail returns the content of the last lines of a CRI-format log file
// (TIMESTAMP STREAM TAG CONTENT per line), at most maxBytes from the end.
func logTail(path string, lines, maxBytes int) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var out []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) < 4 {
			continue
		}
		content := f[3]
		if f[2] == "F" {
			content += "\n"
		}
		out = append(out, content)
	}
	if len(out) > lines {
		out = out[len(out)-lines:]
	}
	msg := strings.Join(out, "")
	if len(msg) > maxBytes {
		msg = msg[len(msg)-maxBytes:]
	}
	return msg
}

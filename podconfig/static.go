package podconfig

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// Annotations a node agent puts on the pods it runs, as upstream kubelet.
const (
	// ConfigSourceAnnotation names the source a pod came from ("api",
	// "file", "http", ...). The merger sets it on every pod.
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	// ConfigHashAnnotation is a static pod's UID, derived from its content.
	ConfigHashAnnotation = "kubernetes.io/config.hash"
	// ConfigSeenAnnotation is when the merger first saw a pod
	// (RFC 3339 with nanoseconds).
	ConfigSeenAnnotation = "kubernetes.io/config.seen"
	// ConfigMirrorAnnotation marks a mirror pod: the API server's copy of a
	// static pod, carrying the static pod's hash.
	ConfigMirrorAnnotation = v1.MirrorPodAnnotationKey
)

// seenTimeLayout is the fixed-width RFC 3339 layout of config.seen.
const seenTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// Priorities of the two built-in priority classes, which the API server's
// Priority admission would resolve for a pod naming them.
const (
	systemClusterCritical = 2000000000
	systemNodeCritical    = systemClusterCritical + 1000
)

// applyAPIDefaults sets the defaults the API server would set (defaulting
// and the Priority admission plugin) on the fields a node agent relies on.
func applyAPIDefaults(pod *v1.Pod) {
	s := &pod.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = v1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = v1.DNSClusterFirst
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To[int64](v1.DefaultTerminationGracePeriodSeconds)
	} else if *s.TerminationGracePeriodSeconds < 0 {
		s.TerminationGracePeriodSeconds = ptr.To[int64](1)
	}
	if s.SchedulerName == "" {
		s.SchedulerName = v1.DefaultSchedulerName
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &v1.PodSecurityContext{}
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptr.To(v1.DefaultEnableServiceLinks)
	}
	if s.Priority == nil {
		switch s.PriorityClassName {
		case "system-node-critical":
			s.Priority = ptr.To[int32](systemNodeCritical)
		case "system-cluster-critical":
			s.Priority = ptr.To[int32](systemClusterCritical)
		default:
			s.Priority = ptr.To[int32](0)
		}
	}
	if s.PreemptionPolicy == nil {
		s.PreemptionPolicy = ptr.To(v1.PreemptLowerPriority)
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i], s.HostNetwork)
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i], s.HostNetwork)
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
}

func defaultContainer(c *v1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	// Limits without requests request the limit.
	for name, limit := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; ok {
			continue
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = v1.ResourceList{}
		}
		c.Resources.Requests[name] = limit.DeepCopy()
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
	if c.Lifecycle != nil {
		for _, h := range []*v1.LifecycleHandler{c.Lifecycle.PostStart, c.Lifecycle.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
	for i := range c.Env {
		if c.Env[i].ValueFrom != nil {
			defaultFieldRef(c.Env[i].ValueFrom.FieldRef)
		}
	}
}

// defaultPullPolicy is Always for an image tagged latest or not tagged at
// all (and not pinned by digest), IfNotPresent otherwise.
func defaultPullPolicy(image string) v1.PullPolicy {
	name, digested := image, false
	if at := strings.IndexByte(name, '@'); at >= 0 {
		name, digested = name[:at], true
	}
	tag := ""
	if colon := strings.LastIndexByte(name, ':'); colon > strings.LastIndexByte(name, '/') {
		tag = name[colon+1:]
	}
	if tag == "latest" || (tag == "" && !digested) {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

func defaultProbe(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	defaultHTTPGet(p.HTTPGet)
}

func defaultHTTPGet(h *v1.HTTPGetAction) {
	if h == nil {
		return
	}
	if h.Path == "" {
		h.Path = "/"
	}
	if h.Scheme == "" {
		h.Scheme = v1.URISchemeHTTP
	}
}

func defaultFieldRef(f *v1.ObjectFieldSelector) {
	if f != nil && f.APIVersion == "" {
		f.APIVersion = "v1"
	}
}

func defaultVolume(vol *v1.Volume) {
	s := &vol.VolumeSource
	if (*s == v1.VolumeSource{}) {
		s.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	if s.DownwardAPI != nil {
		if s.DownwardAPI.DefaultMode == nil {
			s.DownwardAPI.DefaultMode = ptr.To(v1.DownwardAPIVolumeSourceDefaultMode)
		}
		for i := range s.DownwardAPI.Items {
			defaultFieldRef(s.DownwardAPI.Items[i].FieldRef)
		}
	}
	if s.Projected != nil {
		if s.Projected.DefaultMode == nil {
			s.Projected.DefaultMode = ptr.To(v1.ProjectedVolumeSourceDefaultMode)
		}
		for _, src := range s.Projected.Sources {
			if src.DownwardAPI != nil {
				for i := range src.DownwardAPI.Items {
					defaultFieldRef(src.DownwardAPI.Items[i].FieldRef)
				}
			}
		}
	}
	if s.HostPath != nil && s.HostPath.Type == nil {
		s.HostPath.Type = ptr.To(v1.HostPathUnset)
	}
}

// staticPodOptions say where a static pod came from.
type staticPodOptions struct {
	nodeName string
	source   string // the source's name, e.g. "file"
	location string // the file path or URL
	// tolerateNoExecute adds a toleration of every NoExecute taint, which
	// upstream gives to pods from files so node problems do not evict them.
	tolerateNoExecute bool
}

// makeStatic turns a decoded, defaulted pod into a static pod of this node:
// a UID derived from its content, the node and the source; the name suffixed
// with the node name; namespace "default" if unset; spec.nodeName; the
// config annotations; phase Pending.
func makeStatic(pod *v1.Pod, o staticPodOptions) error {
	if pod.UID == "" {
		uid, err := staticPodUID(pod, o)
		if err != nil {
			return err
		}
		pod.UID = uid
	}
	pod.Name = pod.Name + "-" + strings.ToLower(o.nodeName)
	if msgs := validation.IsDNS1123Subdomain(pod.Name); len(msgs) > 0 {
		return &ManifestError{Source: o.location, Fields: []FieldError{{
			Field:  "metadata.name",
			Detail: fmt.Sprintf("with the node name appended, %q is not valid: %s", pod.Name, strings.Join(msgs, "; ")),
		}}}
	}
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = o.nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[ConfigHashAnnotation] = string(pod.UID)
	pod.Annotations[ConfigSourceAnnotation] = o.source
	if o.tolerateNoExecute {
		addTolerationOfNoExecute(pod)
	}
	pod.Status.Phase = v1.PodPending
	return nil
}

// staticPodUID hashes the pod as decoded and defaulted, the node name and
// the source. The same manifest on the same node from the same place always
// gets the same UID, and any change to it a new one.
func staticPodUID(pod *v1.Pod, o staticPodOptions) (types.UID, error) {
	data, err := json.Marshal(pod)
	if err != nil {
		return "", fmt.Errorf("hash pod %s: %w", pod.Name, err)
	}
	h := md5.New() // an identity, not a security measure
	h.Write(data)
	fmt.Fprintf(h, "\x00node:%s\x00%s:%s", o.nodeName, o.source, o.location)
	return types.UID(hex.EncodeToString(h.Sum(nil))), nil
}

func addTolerationOfNoExecute(pod *v1.Pod) {
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	for _, t := range pod.Spec.Tolerations {
		if t.Key == "" && t.Operator == want.Operator && t.Effect == want.Effect && t.TolerationSeconds == nil {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, want)
}

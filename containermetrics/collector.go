package containermetrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// PodLister names the cgroups: which pod a pod cgroup belongs to, and
// which container (or sandbox) of which pod a container cgroup is.
// criruntime.Runtime satisfies it.
type PodLister interface {
	// ListPods lists the runtime's pods; all includes exited containers.
	// It blocks on the runtime.
	ListPods(ctx context.Context, all bool) ([]*nodekit.Pod, error)
}

// ImageLister gives the images' names: a container's image label is the
// first tag of the image it runs, as containerd names it to cadvisor.
// criruntime.Runtime satisfies it.
type ImageLister interface {
	// ListImages lists the runtime's images; it blocks on the runtime.
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
}

// Config configures New.
type Config struct {
	// Roots are the cgroups (by name, e.g. "/kubepods" or
	// "/kubepods.slice") served with everything below them, as kubelet
	// hands cadvisor its node-allocatable root and the kubelet, runtime
	// and system cgroups. The root cgroup "/" is always served (alone).
	// At least one is required.
	Roots []string
	// Pods names pod and container cgroups. Nil serves every cgroup with
	// the id label only.
	Pods PodLister
	// Images, if set, names the images containers run; without it (or
	// for an image it does not list) the image the pod asked for is
	// served, in its docker-normalized form.
	Images ImageLister
	// SandboxImage is the image label of pod sandbox (pause) containers:
	// the runtime's sandbox image (criruntime.Runtime.SandboxImage). Empty
	// (containerd 2 does not report it), the first image Images lists as
	// pinned is used.
	SandboxImage string
	// CgroupRoot is where the cgroup hierarchies are mounted (default
	// /sys/fs/cgroup); ProcDir is /proc by default; RootDir is the
	// machine's root for /etc/machine-id and /sys (default /). Tests point
	// them at fake trees.
	CgroupRoot, ProcDir, RootDir string
	// Clock stamps the samples and container_last_seen. Default the real
	// clock.
	Clock clock.PassiveClock
}

// Collector produces the /metrics/cadvisor series. Its methods are safe
// for concurrent use.
type Collector struct {
	cfg     Config
	h       hierarchy
	boot    time.Time
	machine machineInfo
	// parts are the filesystems served for the root cgroup, listed once
	// (see loadPartitions); statfs reads their usage on each scrape.
	parts  map[string]partition
	statfs statfsFunc
	// devName names the device numbers of the blkio counters, from the
	// block devices listed once (RootDir/sys/block) and parts.
	devName func(major, minor uint64) string
}

// New checks the cgroup hierarchy and reads the machine's description
// (cores, memory, IDs) and the mount table (ProcDir/self/mountinfo: the
// filesystems of the root's container_fs_* series) once, as upstream
// caches its machine and filesystem info.
func New(cfg Config) (*Collector, error) {
	if len(cfg.Roots) == 0 {
		return nil, errors.New("containermetrics: Config.Roots is empty (give the kubepods cgroup)")
	}
	for i, r := range cfg.Roots {
		if !strings.HasPrefix(r, "/") {
			return nil, fmt.Errorf("containermetrics: Config.Roots[%d] %q is not an absolute cgroup name", i, r)
		}
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.ProcDir == "" {
		cfg.ProcDir = "/proc"
	}
	if cfg.RootDir == "" {
		cfg.RootDir = "/"
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	h, err := detectHierarchy(cfg.CgroupRoot)
	if err != nil {
		return nil, err
	}
	c := &Collector{cfg: cfg, h: h, parts: loadPartitions(cfg.ProcDir), statfs: realStatfs}
	c.devName = deviceNamer(loadDiskNames(filepath.Join(cfg.RootDir, "sys")), c.parts)
	c.boot = bootTime(cfg.ProcDir)
	if c.machine, err = readMachine(cfg.ProcDir, cfg.RootDir, cfg.Clock.Now()); err != nil {
		return nil, err
	}
	return c, nil
}

// Gatherer returns what one scrape of /metrics/cadvisor serves: the
// machine_* series, cadvisor_version_info and the container_* series of
// every cgroup served. ctx bounds the runtime call naming the cgroups;
// the cgroup files are read when the result is gathered.
func (c *Collector) Gatherer(ctx context.Context) prometheus.Gatherer {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(machineCollector{c.machine}, scrape{c: c, ctx: ctx})
	return reg
}

// containerLabels are the base labels of every container_* series, as
// kubelet maps cadvisor's: id is the cgroup name; name the runtime's
// container ID; image, pod, namespace and container from the runtime,
// empty where the cgroup is not a container (the QoS and pod cgroups:
// a pod cgroup has pod and namespace only) and container empty for a
// pod's sandbox.
var containerLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

type identity struct {
	container, image, name, namespace, pod string
	created                                time.Time
	sandbox                                bool
}

func (id identity) values(cgroup string) []string {
	return []string{id.container, cgroup, id.image, id.name, id.namespace, id.pod}
}

// scrape is the collector of one scrape (see Gatherer).
type scrape struct {
	c   *Collector
	ctx context.Context //nolint:containedctx // one scrape's request context: prometheus.Collector.Collect takes none
}

// Describe sends nothing: the series' labels depend on the cgroups found
// (an unchecked collector).
func (scrape) Describe(chan<- *prometheus.Desc) {}

// Collect reads every cgroup served and sends its series.
func (s scrape) Collect(ch chan<- prometheus.Metric) {
	c := s.c
	logger := klog.FromContext(s.ctx)
	failed := 0.0
	ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, 1, "", "", "", c.machine.kernel, c.machine.os)
	names, err := c.cgroups()
	if err != nil {
		logger.Error(err, "Unable to list the cgroups for /metrics/cadvisor")
		failed = 1
	}
	ids, err := c.identities(s.ctx)
	if err != nil {
		logger.Error(err, "Unable to name the cgroups for /metrics/cadvisor")
		failed = 1
	}
	now := c.cfg.Clock.Now()
	for _, name := range names {
		st, err := c.h.read(name, c.boot)
		if err != nil {
			continue // removed since the walk
		}
		id := ids.of(name)
		st.fds, st.sockets = countFds(c.cfg.ProcDir, st.procs)
		switch {
		case name == "/":
			// The root's network is the host's (pid 1's namespace).
			st.net = readNetDev(filepath.Join(c.cfg.ProcDir, "1", "net", "dev"))
		case id.sandbox && len(st.procs) > 0:
			st.net = readNetDev(filepath.Join(c.cfg.ProcDir, strconv.Itoa(st.procs[0]), "net", "dev"))
		}
		if c.h.unified {
			st.blkio = readIoStatV2(c.h.dir("io", name), c.devName)
		} else {
			st.blkio = readBlkioV1(c.h.dir("blkio", name), c.devName)
		}
		if name == "/" {
			st.fs = readFilesystems(s.ctx, c.parts, c.statfs, filepath.Join(c.cfg.ProcDir, "diskstats"))
		}
		if pid := rootPid(name, id, st.procs); pid > 0 {
			st.ulimits = readUlimits(c.cfg.ProcDir, pid)
		}
		c.emit(ch, name, id, st, now)
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed)
}

// cgroups is "/" and every cgroup at or below the roots, without
// duplicates.
func (c *Collector) cgroups() ([]string, error) {
	out := []string{"/"}
	var errs []error
	for _, r := range c.cfg.Roots {
		if r == "/" {
			continue
		}
		names, err := c.h.children(r)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, names...)
	}
	slices.Sort(out)
	return slices.Compact(out), errors.Join(errs...)
}

// identities maps container IDs and pod UIDs to their labels.
type identities struct {
	containers map[string]identity
	pods       map[string]identity
}

func (c *Collector) identities(ctx context.Context) (identities, error) {
	ids := identities{containers: map[string]identity{}, pods: map[string]identity{}}
	if c.cfg.Pods == nil {
		return ids, nil
	}
	pods, err := c.cfg.Pods.ListPods(ctx, true)
	if err != nil {
		return ids, fmt.Errorf("containermetrics: list pods: %w", err)
	}
	images, pinned, err := c.imageNames(ctx)
	if err != nil {
		return ids, err
	}
	sandboxImage := c.cfg.SandboxImage
	if sandboxImage == "" {
		sandboxImage = pinned
	}
	for _, p := range pods {
		ids.pods[string(p.ID)] = identity{pod: p.Name, namespace: p.Namespace}
		for _, sb := range p.Sandboxes {
			ids.containers[sb.ID.ID] = identity{image: sandboxImage, name: sb.ID.ID, namespace: p.Namespace,
				pod: p.Name, created: sb.CreatedAt, sandbox: true}
		}
		for _, ct := range p.Containers {
			image := images[ct.ImageID]
			if image == "" {
				image = images[ct.ImageRef]
			}
			if image == "" {
				image = imageName(ct.Image)
			}
			ids.containers[ct.ID.ID] = identity{container: ct.Name, image: image, name: ct.ID.ID,
				namespace: p.Namespace, pod: p.Name, created: ct.CreatedAt}
		}
	}
	return ids, nil
}

// imageNames maps image IDs to their first tag (or, untagged, digest),
// and names the first pinned image: containerd 2 pins its sandbox image
// (and does not report it in its status), so that is the sandbox image
// when Config.SandboxImage is empty.
func (c *Collector) imageNames(ctx context.Context) (map[string]string, string, error) {
	out := map[string]string{}
	if c.cfg.Images == nil {
		return out, "", nil
	}
	images, err := c.cfg.Images.ListImages(ctx)
	if err != nil {
		return out, "", fmt.Errorf("containermetrics: list images: %w", err)
	}
	pinned := ""
	for _, img := range images {
		names := append(slices.Clone(img.GetRepoTags()), img.GetRepoDigests()...)
		if len(names) == 0 || img.GetId() == "" {
			continue
		}
		out[img.GetId()] = names[0]
		if img.GetPinned() && pinned == "" {
			pinned = names[0]
		}
	}
	return out, pinned, nil
}

// of names a cgroup: a container cgroup by its last element (the
// container ID, or cri-containerd-ID.scope and the like under systemd),
// a pod cgroup (podUID, or ...-podUID.slice) by the pod's UID.
func (ids identities) of(cgroup string) identity {
	base := filepath.Base(cgroup)
	if id, ok := ids.containers[containerIDOf(base)]; ok {
		return id
	}
	if uid, ok := podUIDOf(base); ok {
		if id, ok := ids.pods[uid]; ok {
			return id
		}
	}
	return identity{}
}

// containerIDOf strips a systemd scope's runtime prefix and suffix.
func containerIDOf(base string) string {
	if s, ok := strings.CutSuffix(base, ".scope"); ok {
		if i := strings.LastIndexByte(s, '-'); i >= 0 {
			return s[i+1:]
		}
		return s
	}
	return base
}

// podUIDOf reads the pod UID of a pod cgroup: "pod<UID>" (cgroupfs) or
// "kubepods-<qos>-pod<UID with _ for ->.slice" (systemd).
func podUIDOf(base string) (string, bool) {
	if s, ok := strings.CutSuffix(base, ".slice"); ok {
		i := strings.LastIndex(s, "-pod")
		if i < 0 {
			return "", false
		}
		return strings.ReplaceAll(s[i+len("-pod"):], "_", "-"), true
	}
	uid, ok := strings.CutPrefix(base, "pod")
	return uid, ok && uid != ""
}

// imageName is the image reference as containerd names the image a
// container runs (the docker-normalized reference: docker.io/library/
// for a bare name, :latest without tag or digest), as cadvisor reports it.
func imageName(ref string) string {
	if ref == "" || strings.HasPrefix(ref, "sha256:") {
		return ref
	}
	name := ref
	first, rest, hasSlash := strings.Cut(ref, "/")
	if !hasSlash || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if !hasSlash {
			name = "docker.io/library/" + ref
		} else {
			name = "docker.io/" + ref
		}
	} else if first == "docker.io" && !strings.Contains(rest, "/") {
		name = "docker.io/library/" + rest
	}
	last := name[strings.LastIndexByte(name, '/')+1:]
	if !strings.Contains(last, ":") && !strings.Contains(last, "@") {
		name += ":latest"
	}
	return name
}

// bootTime is when the machine booted (btime in /proc/stat); cadvisor
// never reports a cgroup as created before it.
func bootTime(procDir string) time.Time {
	b, err := os.ReadFile(filepath.Join(procDir, "stat"))
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			var sec int64
			if _, err := fmt.Sscan(v, &sec); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
}

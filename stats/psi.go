package stats

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/internal/psi"
)

// PodCgroups locates pod cgroups, whose pressure (PSI) the Summary
// reports; examples/fullagent answers from its pod store and cgroupmgr.
type PodCgroups interface {
	// PodCgroup is the cgroup of the pod with uid as a path below the
	// cgroup mount ("/kubepods/burstable/pod<UID>", or the nested slices
	// of the systemd driver); ok is false for a pod without one known.
	PodCgroup(uid types.UID) (path string, ok bool)
}

// Pressure is what kubelet (its cadvisor) reports of one cgroup's
// pressure stall information: a block per resource the cgroup has, nil
// for one it has not. Under cgroup v2 the blocks hold cpu.pressure,
// memory.pressure and io.pressure (totals in microseconds, as the
// kernel writes them); under cgroup v1, which has no PSI, they are zeros.
type Pressure struct {
	CPU, Memory, IO *statsapi.PSIStats
}

// unified tells whether CgroupDir is a cgroup v2 hierarchy. A v1
// machine's hybrid CgroupDir/unified is not looked at, as kubelet.
func (m Machine) unified() bool {
	_, err := os.Stat(m.cgroup("cgroup.controllers"))
	return err == nil
}

// Pressure reads the PSI of cgroup name ("/" is the root), as kubelet's
// cadvisor: under cgroup v2 the cgroup's three pressure files (a missing
// file gives zeros; the memory block needs memory.max, except at the
// root), under v1 zero blocks for the cpu, memory and blkio controllers
// the cgroup is in. A cgroup that does not exist gives an error wrapping
// fs.ErrNotExist; a malformed file leaves its block out and is reported
// in the error.
func (m Machine) Pressure(name string) (Pressure, error) {
	if m.unified() {
		return m.pressureV2(name)
	}
	var out Pressure
	found := false
	for _, c := range []struct {
		dirs []string
		dst  **statsapi.PSIStats
	}{{[]string{"cpu", "cpu,cpuacct"}, &out.CPU}, {[]string{"memory"}, &out.Memory}, {[]string{"blkio"}, &out.IO}} {
		for _, d := range c.dirs {
			if dirExists(m.cgroup(filepath.Join(d, name))) {
				*c.dst, found = &statsapi.PSIStats{}, true
				break
			}
		}
	}
	if !found {
		return Pressure{}, fmt.Errorf("stats: cgroup %s: %w", name, fs.ErrNotExist)
	}
	return out, nil
}

func (m Machine) pressureV2(name string) (Pressure, error) {
	d := m.cgroup(name)
	if !dirExists(d) {
		return Pressure{}, fmt.Errorf("stats: cgroup %s: %w", name, fs.ErrNotExist)
	}
	var out Pressure
	var errs []error
	read := func(file string) *statsapi.PSIStats {
		s, err := psi.ReadFile(filepath.Join(d, file))
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		return toPSIStats(s)
	}
	out.CPU = read(psi.CPUFile)
	if name == "/" || fileExists(filepath.Join(d, "memory.max")) {
		out.Memory = read(psi.MemoryFile)
	}
	out.IO = read(psi.IOFile)
	return out, errors.Join(errs...)
}

func toPSIStats(s psi.Stats) *statsapi.PSIStats {
	data := func(d psi.Data) statsapi.PSIData {
		return statsapi.PSIData{Total: d.Total, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &statsapi.PSIStats{Some: data(s.Some), Full: data(s.Full)}
}

// containerCgroup finds container id's cgroup below its pod's: the
// child named by the ID (cgroupfs driver) or ending in "-ID.scope"
// (systemd: cri-containerd-ID.scope), in the unified tree or the v1
// memory controller's.
func (m Machine) containerCgroup(pod, id string) (string, bool) {
	if id == "" {
		return "", false
	}
	tree := m.cgroup(pod)
	if !m.unified() {
		tree = m.cgroup(filepath.Join("memory", pod))
	}
	if dirExists(filepath.Join(tree, id)) {
		return filepath.Join(pod, id), true
	}
	entries, err := os.ReadDir(tree)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), "-"+id+".scope") {
			return filepath.Join(pod, e.Name()), true
		}
	}
	return "", false
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// pressure reads cgroup name's PSI; ok is false when the cgroup does not
// exist. Other failures are logged and leave their blocks out.
func (p *Provider) pressure(ctx context.Context, name string) (Pressure, bool) {
	pr, err := p.cfg.Machine.Pressure(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Pressure{}, false
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Unable to read cgroup pressure", "cgroup", name, "err", err)
	}
	return pr, true
}

// attachPressure puts the cgroup's CPU and memory PSI into the stats
// the runtime reported (a nil one stays nil).
func attachPressure(pr Pressure, cpu *statsapi.CPUStats, mem *statsapi.MemoryStats) {
	if cpu != nil && pr.CPU != nil {
		cpu.PSI = pr.CPU
	}
	if mem != nil && pr.Memory != nil {
		mem.PSI = pr.Memory
	}
}

// ioStats is the IO block of a cgroup with an io (v2) or blkio (v1)
// controller; nil without one.
func ioStats(pr Pressure, now time.Time) *statsapi.IOStats {
	if pr.IO == nil {
		return nil
	}
	return &statsapi.IOStats{Time: metav1.NewTime(now), PSI: pr.IO}
}

// podPressure fills the PSI of a pod and its containers as kubelet's
// CRI stats provider on containerd, which takes them from cadvisor's
// pod and container cgroups: every container has an IO block (full
// Summary only), with the runtime's PSI, replaced by its cgroup's when
// found; the pod has its cgroup's, or, without a pod cgroup, no PSI and
// an IO block holding only a time.
func (p *Provider) podPressure(ctx context.Context, ps *statsapi.PodStats, raw *podRaw, full bool, now time.Time) {
	podCg, havePod := "", false
	if p.cfg.PodCgroups != nil {
		podCg, havePod = p.cfg.PodCgroups.PodCgroup(types.UID(ps.PodRef.UID))
	}
	for i := range ps.Containers {
		cs := &ps.Containers[i]
		c := raw.containers[cs.Name]
		if full {
			cs.IO = containerIO(c.GetIo(), now)
		}
		if !havePod {
			continue
		}
		name, ok := p.cfg.Machine.containerCgroup(podCg, c.GetAttributes().GetId())
		if !ok {
			continue
		}
		if pr, ok := p.pressure(ctx, name); ok {
			attachPressure(pr, cs.CPU, cs.Memory)
			if io := ioStats(pr, now); full && io != nil {
				cs.IO = io
			}
		}
	}
	if havePod {
		if pr, ok := p.pressure(ctx, podCg); ok {
			attachPressure(pr, ps.CPU, ps.Memory)
			if full {
				ps.IO = ioStats(pr, now)
			}
			return
		}
	}
	if !full {
		return
	}
	for _, cs := range ps.Containers {
		if cs.IO != nil {
			ps.IO = &statsapi.IOStats{Time: cs.IO.Time}
		}
	}
}

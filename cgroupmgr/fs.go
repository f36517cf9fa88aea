package cgroupmgr

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// fsDriver is the cgroupfs driver: it writes the cgroup file system
// directly, on v1 (one directory per mounted hierarchy) or v2 (one
// unified tree).
type fsDriver struct {
	root    string
	version Version
	kill    func(pid int) error
	clock   clock.Clock

	hierarchies     []hierarchy     // v1: every mounted hierarchy
	rootControllers map[string]bool // v2: the root's cgroup.controllers

	// layout spells a name as its path components below a mount point;
	// nil is the cgroupfs form (the name's own components). The systemd
	// driver sets it to its slices.
	layout func(CgroupName) []string
}

// parts are name's path components below a hierarchy's mount point.
func (d *fsDriver) parts(name CgroupName) []string {
	if d.layout == nil {
		return name
	}
	return d.layout(name)
}

// rel is name's path below a hierarchy's mount point.
func (d *fsDriver) rel(name CgroupName) string {
	return "/" + path.Join(d.parts(name)...)
}

var (
	_ Driver     = (*fsDriver)(nil)
	_ memoryUser = (*fsDriver)(nil)
)

// hierarchy is one v1 hierarchy: its mount point and controllers.
type hierarchy struct {
	dir         string
	controllers map[string]bool
}

// Kill and removal retry bounds, as upstream kills: 5 rounds of SIGKILL;
// rmdir then waits for the killed processes to leave (they stay charged
// until their parent reaps them) for about 10 seconds.
const (
	killRounds       = 5
	rmdirAttempts    = 12
	rmdirFirstWait   = 10 * time.Millisecond
	rmdirLongestWait = 2 * time.Second
)

// Controllers each version needs (upstream's required subsystems).
var (
	requiredV1 = []string{"cpu", "cpuacct", "cpuset", "memory", "pids"}
	requiredV2 = []string{"cpu", "cpuset", "memory", "pids"}
	// existenceV1 are the v1 controllers whose directories must all be
	// there for a cgroup to exist, as upstream's allow list.
	existenceV1 = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "name=systemd"}
	// neededV2 must be enabled in a v2 cgroup (where the root has them).
	neededV2 = []string{"cpu", "cpuset", "memory", "pids", "hugetlb"}
)

// cgroupMountsIn returns the entries of root that are cgroup (or
// cgroup2) mounts, by their resolved paths. When there are any, only
// they are hierarchies: a systemd run in a container mounts a tmpfs of
// the layout it expects, with directories for controllers the kernel
// mounts otherwise (cpu,cpuacct where cpu and cpuacct are apart, hugetlb
// where it is not mounted), and nothing is mounted on those. A tree
// without any (a test's plain directories) is taken as it is.
func cgroupMountsIn(root string, entries []os.DirEntry) map[string]bool {
	out := map[string]bool{}
	for _, e := range entries {
		real, err := filepath.EvalSymlinks(filepath.Join(root, e.Name()))
		if err != nil {
			continue
		}
		if magic, err := fsMagic(real); err == nil && (magic == unix.CGROUP_SUPER_MAGIC || magic == unix.CGROUP2_SUPER_MAGIC) {
			out[real] = true
		}
	}
	return out
}

// newFSDriver discovers the hierarchies under root. version
// VersionUnknown detects it. On v1 every directory (or link to one) under
// root is a hierarchy named after its controllers ("cpu,cpuacct",
// "memory", "systemd" for name=systemd); a cgroup2 mount there (the
// hybrid layout's "unified") is one without controllers.
func newFSDriver(root string, version Version, kill func(int) error, clk clock.Clock) (*fsDriver, error) {
	if version == VersionUnknown {
		v, err := DetectVersion(root)
		if err != nil {
			return nil, err
		}
		version = v
	}
	d := &fsDriver{root: root, version: version, kill: kill, clock: clk}
	switch version {
	case V1:
		entries, err := os.ReadDir(root)
		if err != nil {
			return nil, fmt.Errorf("cgroupmgr: list cgroup v1 hierarchies: %w", err)
		}
		seen := map[string]bool{}
		mounted := cgroupMountsIn(root, entries)
		for _, e := range entries {
			real, err := filepath.EvalSymlinks(filepath.Join(root, e.Name()))
			if err != nil || seen[real] {
				continue
			}
			if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
				continue
			}
			if len(mounted) > 0 && !mounted[real] {
				continue
			}
			seen[real] = true
			h := hierarchy{dir: real, controllers: map[string]bool{}}
			if magic, err := fsMagic(real); err == nil && magic == unix.CGROUP2_SUPER_MAGIC {
				// The hybrid layout's cgroup2 mount: no controller is
				// written there, but runc puts containers there too, so
				// cgroups are created and removed there as well, as
				// upstream's cgroupfs manager does.
				d.hierarchies = append(d.hierarchies, h)
				continue
			}
			for _, c := range strings.Split(filepath.Base(real), ",") {
				if c == "systemd" {
					c = "name=systemd"
				}
				h.controllers[c] = true
			}
			d.hierarchies = append(d.hierarchies, h)
		}
		sort.Slice(d.hierarchies, func(i, j int) bool { return d.hierarchies[i].dir < d.hierarchies[j].dir })
	case V2:
		ctrls, err := readControllers(root)
		if err != nil {
			return nil, fmt.Errorf("cgroupmgr: %s is not a cgroup v2 root: %w", root, err)
		}
		d.rootControllers = ctrls
	default:
		return nil, fmt.Errorf("cgroupmgr: Config.Version: unknown cgroup version %d", version)
	}
	return d, nil
}

// checkControllers fails naming the controllers the node needs but lacks.
func (d *fsDriver) checkControllers() error {
	have := d.rootControllers
	required := requiredV2
	if d.version == V1 {
		required = requiredV1
		have = map[string]bool{}
		for _, h := range d.hierarchies {
			for c := range h.controllers {
				have[c] = true
			}
		}
	}
	var missing []string
	for _, c := range required {
		if !have[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cgroupmgr: cgroup %s under %s lacks required controllers %s", d.version, d.root, strings.Join(missing, ", "))
	}
	return nil
}

// dirs are name's directories: one per hierarchy on v1, one on v2.
func (d *fsDriver) dirs(name CgroupName) []string {
	if d.version == V2 {
		return []string{filepath.Join(d.root, d.rel(name))}
	}
	out := make([]string, 0, len(d.hierarchies))
	for _, h := range d.hierarchies {
		out = append(out, filepath.Join(h.dir, d.rel(name)))
	}
	return out
}

// Apply creates name where missing and writes rc.
func (d *fsDriver) Apply(ctx context.Context, name CgroupName, rc *ResourceConfig) error {
	if rc == nil {
		rc = &ResourceConfig{}
	}
	if d.version == V2 {
		return d.applyV2(ctx, name, rc)
	}
	return d.applyV1(ctx, name, rc)
}

// Exists reports whether name is complete: present in every hierarchy
// upstream checks (v1), or present with the needed controllers (v2).
func (d *fsDriver) Exists(_ context.Context, name CgroupName) (bool, error) {
	if d.version == V2 {
		dir := filepath.Join(d.root, d.rel(name))
		have, err := readControllers(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range neededV2 {
			if d.rootControllers[c] && !have[c] {
				return false, nil
			}
		}
		return true, nil
	}
	for _, h := range d.hierarchies {
		if !slices.ContainsFunc(existenceV1, func(c string) bool { return h.controllers[c] }) {
			continue
		}
		_, err := os.Stat(filepath.Join(h.dir, d.rel(name)))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// Children lists the subdirectories of name in any hierarchy.
func (d *fsDriver) Children(_ context.Context, name CgroupName) ([]string, error) {
	set := map[string]bool{}
	for _, dir := range d.dirs(name) {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroupmgr: list %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				set[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// MemoryUsage is the memory charged to name, in bytes.
func (d *fsDriver) MemoryUsage(_ context.Context, name CgroupName) (int64, error) {
	file := "memory.current"
	dir := filepath.Join(d.root, d.rel(name))
	if d.version == V1 {
		file = "memory.usage_in_bytes"
		dir = ""
		for _, h := range d.hierarchies {
			if h.controllers["memory"] {
				dir = filepath.Join(h.dir, d.rel(name))
			}
		}
		if dir == "" {
			return 0, errors.New("cgroupmgr: no cgroup v1 memory hierarchy")
		}
	}
	v, err := readInt(dir, file)
	if err != nil {
		return 0, fmt.Errorf("cgroupmgr: memory usage: %w", err)
	}
	return v, nil
}

// Destroy kills what is left in name (upstream kills before removing: a
// cgroup with processes cannot be removed), then removes every directory
// of name, deepest first.
func (d *fsDriver) Destroy(ctx context.Context, name CgroupName) error {
	if len(name) == 0 {
		return errors.New("cgroupmgr: refusing to destroy the root cgroup")
	}
	dirs := d.dirs(name)
	if err := d.killAll(ctx, name, dirs); err != nil {
		return fmt.Errorf("cgroupmgr: destroy %s: %w", d.rel(name), err)
	}
	var errs []error
	for _, dir := range dirs {
		if err := d.removeTree(ctx, dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroupmgr: destroy %s: %w", d.rel(name), err)
	}
	return nil
}

// killAll kills every process in dirs and their descendants, in up to
// killRounds rounds; processes already gone count as killed.
func (d *fsDriver) killAll(ctx context.Context, name CgroupName, dirs []string) error {
	pids, err := treePids(dirs)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx)
	killed := map[int]bool{}
	var errs []error
	for round := 0; round < killRounds; round++ {
		errs = errs[:0]
		for _, pid := range pids {
			if killed[pid] {
				continue
			}
			logger.V(3).Info("Killing process left in a cgroup", "pid", pid, "cgroup", d.rel(name))
			if err := d.kill(pid); err != nil {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
				continue
			}
			killed[pid] = true
		}
		if len(errs) == 0 {
			return nil
		}
	}
	return errors.Join(errs...)
}

// removeTree removes dir and every directory below it, deepest first.
func (d *fsDriver) removeTree(ctx context.Context, dir string) error {
	var all []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() {
			all = append(all, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk %s: %w", dir, err)
	}
	sort.Slice(all, func(i, j int) bool { return strings.Count(all[i], "/") > strings.Count(all[j], "/") })
	for _, p := range all {
		if err := d.rmdir(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// rmdir removes one cgroup directory. The kernel refuses (EBUSY) while
// processes are charged to it, which lasts until killed ones are reaped:
// it kills again and retries with back-off, then fails naming the pids.
func (d *fsDriver) rmdir(ctx context.Context, p string) error {
	wait := rmdirFirstWait
	filesDropped := false
	for attempt := 1; ; attempt++ {
		err := unix.Rmdir(p)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ENOTEMPTY) && !filesDropped:
			// Only a plain file system (a test's tree) says so: cgroupfs
			// control files never keep a directory. Drop the files.
			if rerr := removeFiles(p); rerr != nil {
				return fmt.Errorf("remove %s: %w", p, rerr)
			}
			filesDropped = true
			continue
		case !errors.Is(err, unix.EBUSY) || attempt >= rmdirAttempts:
			pids, _ := readPids(p)
			if len(pids) > 0 {
				return fmt.Errorf("remove %s: processes %v remain in it: %w", p, pids, err)
			}
			return fmt.Errorf("remove %s: %w", p, err)
		}
		if pids, _ := readPids(p); len(pids) > 0 {
			for _, pid := range pids {
				_ = d.kill(pid)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remove %s: %w", p, ctx.Err())
		case <-d.clock.After(wait):
		}
		wait = min(2*wait, rmdirLongestWait)
	}
}

func removeFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// treePids lists the processes in dirs and below, without duplicates.
func treePids(dirs []string) ([]int, error) {
	set := map[int]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !e.IsDir() {
				return nil
			}
			pids, err := readPids(p)
			if err != nil {
				return err
			}
			for _, pid := range pids {
				set[pid] = true
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list processes of %s: %w", dir, err)
		}
	}
	out := make([]int, 0, len(set))
	for pid := range set {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out, nil
}

// readPids reads dir's cgroup.procs; a missing file is no process.
func readPids(dir string) ([]int, error) {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		t := strings.TrimSpace(s.Text())
		if t == "" {
			continue
		}
		pid, err := strconv.Atoi(t)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("%s: unexpected line %q", f.Name(), t)
		}
		out = append(out, pid)
	}
	return out, s.Err()
}

// killProcess is the default kill: SIGKILL; a process already gone is no
// error.
func killProcess(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("invalid pid %d", pid)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// writeFile writes one control file.
func writeFile(dir, file, value string) error {
	p := filepath.Join(dir, file)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("cgroupmgr: write %q to %s: %w", value, p, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroupmgr: write %q to %s: %w", value, p, err)
	}
	return nil
}

func readTrimmed(dir, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	return strings.TrimSpace(string(b)), err
}

// readControllers reads a v2 cgroup.controllers or cgroup.subtree_control
// style list ("cpu memory" or "+cpu +memory").
func readControllers(dir string) (map[string]bool, error) {
	return readControllerFile(dir, "cgroup.controllers")
}

func readControllerFile(dir, file string) (map[string]bool, error) {
	s, err := readTrimmed(dir, file)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, f := range strings.Fields(s) {
		out[strings.TrimPrefix(f, "+")] = true
	}
	return out, nil
}

// hugePageSizesIn lists the page sizes ("2MB") dir has hugetlb files for:
// files named hugetlb.<size><suffix>.
func hugePageSizesIn(dir, suffix string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "hugetlb.*"+suffix))
	var out []string
	for _, m := range matches {
		s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "hugetlb."), suffix)
		if s != "" && !strings.Contains(s, ".") {
			out = append(out, s)
		}
	}
	return out
}

// hugePageWrites is what to write per page size: rc's limits, and
// rc.HugePageOthers (0 when nil) for every other size present.
func hugePageWrites(rc *ResourceConfig, present []string) (map[string]int64, error) {
	out := map[string]int64{}
	for size, limit := range rc.HugePageLimit {
		unit, err := hugePageUnit(size)
		if err != nil {
			return nil, err
		}
		out[unit] = limit
	}
	others := int64(0)
	if rc.HugePageOthers != nil {
		others = *rc.HugePageOthers
	}
	for _, s := range present {
		if _, ok := out[s]; !ok {
			out[s] = others
		}
	}
	return out, nil
}

// Package cgroot creates and removes a top-level cgroup of a test's or a
// script's own in every cgroup hierarchy, for a node agent's cgroupRoot:
// the agent's kubepods tree and its orphaned-pod cleanup then cannot meet
// another agent's on the same machine. Of the rest of nodekit it uses only
// internal/fsutil (the mount table), so the test kit and the cgroup
// manager's own tests can share it.
package cgroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// Root is a cgroup created by Create.
type Root struct {
	// Name is the cgroup in cgroupfs form, "/NAME", for cgroupRoot.
	Name string
}

// Create makes /name in every cgroup v1 hierarchy (with the cpuset of the
// root, as v1 requires before tasks can join) and in a cgroup2 mount.
func Create(name string) (*Root, error) {
	v1, err := mounts("cgroup")
	if err != nil {
		return nil, err
	}
	v2, err := mounts("cgroup2")
	if err != nil {
		return nil, err
	}
	if len(v1)+len(v2) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	r := &Root{Name: "/" + name}
	for _, m := range append(v1, v2...) {
		p := filepath.Join(m, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			_ = r.Remove()
			return nil, fmt.Errorf("create cgroup %s: %w", p, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(m, f)); err == nil && len(v1) > 0 {
				if err := os.WriteFile(filepath.Join(p, f), v, 0o644); err != nil {
					_ = r.Remove()
					return nil, fmt.Errorf("cgroup %s: write %s: %w", p, f, err)
				}
			}
		}
	}
	return r, nil
}

// Remove kills what is left in the cgroup and below it, then deletes the
// directories deepest first, in every hierarchy.
func (r *Root) Remove() error {
	all, err := mounts("cgroup")
	if err != nil {
		return err
	}
	v2, err := mounts("cgroup2")
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range append(all, v2...) {
		top := filepath.Join(m, r.Name)
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // WalkDir lists parents first
			var err error
			for try := 0; try < 50; try++ {
				killProcs(dirs[i])
				if err = syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(100 * time.Millisecond) // the killed tasks are exiting
			}
			if err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// killProcs sends SIGKILL to the processes in one cgroup.
func killProcs(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// mounts lists the mount points of the given filesystem type.
func mounts(fstype string) ([]string, error) {
	all, err := fsutil.Mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range all {
		if m.FSType == fstype {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

package containermetrics_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodekit/nodekit/containermetrics"
)

// A fake machine: one cgroup v1 pod cgroup below kubepods, no runtime
// (so the cgroups carry their id only).
func Example() {
	dir, _ := os.MkdirTemp("", "containermetrics")
	defer os.RemoveAll(dir)
	put := func(path, content string) {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, path)), 0o755)
		_ = os.WriteFile(filepath.Join(dir, path), []byte(content), 0o644)
	}
	put("proc/cpuinfo", "processor\t: 0\n")
	put("proc/meminfo", "MemTotal: 1024 kB\n")
	put("cgroup/memory/memory.usage_in_bytes", "4096\n")
	put("cgroup/memory/kubepods/pod1/memory.usage_in_bytes", "1024\n")
	c, err := containermetrics.New(containermetrics.Config{Roots: []string{"/kubepods"},
		CgroupRoot: filepath.Join(dir, "cgroup"), ProcDir: filepath.Join(dir, "proc"), RootDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	mfs, _ := c.Gatherer(context.Background()).Gather()
	for _, mf := range mfs {
		if mf.GetName() != "container_memory_usage_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "id" {
					fmt.Println(l.GetValue(), m.GetGauge().GetValue())
				}
			}
		}
	}
	// Output:
	// / 4096
	// /kubepods 0
	// /kubepods/pod1 1024
}

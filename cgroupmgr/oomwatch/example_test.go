package oomwatch_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/nodekit/nodekit/cgroupmgr/oomwatch"
)

// Two kernel OOM reports, as /dev/kmsg records: a container over its
// memory limit, then the whole node out of memory.
func Example() {
	kmsg := strings.NewReader(`4,100,5000000,-;stress invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=999
6,101,5000200,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0,oom_memcg=/kubepods/burstable/pod1,task_memcg=/kubepods/burstable/pod1/abc,task=stress,pid=4321,uid=0
3,102,5000300,-;Memory cgroup out of memory: Killed process 4321 (stress) total-vm:400000kB, anon-rss:65200kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:176kB oom_score_adj:999
4,200,9000000,-;java invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0
6,201,9000100,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/app.service,task=java,pid=777,uid=1000
3,202,9000200,-;Out of memory: Killed process 777 (java) total-vm:8000000kB, anon-rss:7000000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:14000kB oom_score_adj:0
`)
	w, err := oomwatch.New(oomwatch.Config{Reader: kmsg, OnOOM: func(ev oomwatch.Event) {
		if ev.VictimCgroup == "/" {
			fmt.Printf("system OOM: killed %s (pid %d) of %s\n", ev.ProcessName, ev.PID, ev.ContainerCgroup)
			return
		}
		fmt.Printf("%s hit its limit: killed %s (pid %d) in %s\n", ev.VictimCgroup, ev.ProcessName, ev.PID, ev.ContainerCgroup)
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// /kubepods/burstable/pod1 hit its limit: killed stress (pid 4321) in /kubepods/burstable/pod1/abc
	// system OOM: killed java (pid 777) of /system.slice/app.service
}

// Package oomwatch reports the kernel's OOM kills, as upstream kubelet's
// OOM watcher (through cAdvisor's oomparser): it reads /dev/kmsg and turns
// each OOM report (the "invoked oom-killer" line, the memory cgroup of the
// victim and the cgroup whose limit was hit, the "Killed process" line) into
// an Event, in both the old format (cgroup v1 "Task in ... killed as a
// result of limit of ...", kernels before 4.19) and the new one-line
// "oom-kill:constraint=...,oom_memcg=...,task_memcg=...,task=...,pid=..."
// summary.
//
// It does not decide what an OOM kill means: a VictimCgroup of "/" is a
// system OOM, for which upstream records a SystemOOM node event; the
// callback does that. Container OOMKilled reasons come from the runtime,
// not from here. Where /dev/kmsg cannot be read, Run logs once and returns
// nil.
//
//	w, err := oomwatch.New(oomwatch.Config{OnOOM: func(ev oomwatch.Event) {
//		if ev.VictimCgroup == "/" {
//			recorder.Eventf(nodeRef, v1.EventTypeWarning, "SystemOOM",
//				"System OOM encountered, victim process: %s, pid: %d", ev.ProcessName, ev.PID)
//		}
//	}})
//	go w.Run(ctx)
package oomwatch

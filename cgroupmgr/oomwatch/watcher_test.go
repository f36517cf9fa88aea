package oomwatch

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/internal/itest"
)

var boot = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

// A cgroup v2 memory.max hit on a 6.x kernel: the one-line summary.
const newKernelMemcg = `4,2101,5000000,-;stress invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=999
4,2102,5000010,-;CPU: 1 PID: 4321 Comm: stress Not tainted 6.1.0-18-amd64 #1  Debian 6.1.76-1
4,2103,5000020,-;Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2 04/01/2014
4,2104,5000030,-;Call Trace:
4,2105,5000040,-; <TASK>
4,2106,5000050,-; dump_stack_lvl+0x44/0x5c
6,2107,5000100,-;memory: usage 65536kB, limit 65536kB, failcnt 12
6,2108,5000110,-;Tasks state (memory values in pages):
6,2109,5000120,-;[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name
6,2110,5000130,-;[   4321]     0  4321   100000    16300   180224        0           999 stress
6,2111,5000200,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-abc.scope,mems_allowed=0,oom_memcg=/kubepods/burstable/pod12-34,task_memcg=/kubepods/burstable/pod12-34/abc,task=stress,pid=4321,uid=0
3,2112,5000300,-;Memory cgroup out of memory: Killed process 4321 (stress) total-vm:400000kB, anon-rss:65200kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:176kB oom_score_adj:999
`

// A system-wide OOM on a 5.x kernel.
const newKernelGlobal = `4,3001,7200000000,-;java invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0
6,3002,7200000500,-;Mem-Info:
6,3003,7200000900,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/big-app.service,task=big app,pid=777,uid=1000
3,3004,7200001000,-;Out of memory: Killed process 777 (big app) total-vm:8000000kB, anon-rss:7000000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:14000kB oom_score_adj:0
`

// A cgroup v1 limit on a 4.14 kernel: "Task in ... killed as a result of
// limit of ...", then a separate "Killed process" line.
const oldKernelMemcg = `4,501,1234567890,-;python invoked oom-killer: gfp_mask=0x14000c0(GFP_KERNEL), nodemask=(null), order=0, oom_score_adj=-998
6,502,1234567900,-;python cpuset=abc mems_allowed=0
6,503,1234567950,-;Task in /kubepods/podg-1/def killed as a result of limit of /kubepods/podg-1
6,504,1234567960,-;memory: usage 262144kB, limit 262144kB, failcnt 3
3,505,1234568000,-;Memory cgroup out of memory: Kill process 999 (python) score 1998 or sacrifice child
3,506,1234568010,-;Killed process 999 (python) total-vm:500000kB, anon-rss:261000kB, file-rss:0kB, shmem-rss:0kB
6,507,1234568020,-;oom_reaper: reaped process 999 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB
`

func collect(t *testing.T, input string) []Event {
	t.Helper()
	var got []Event
	w, err := New(Config{Reader: strings.NewReader(input), BootTime: boot, OnOOM: func(e Event) { got = append(got, e) }})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestKernelFormats(t *testing.T) {
	cases := []struct {
		name  string
		input string
		want  []Event
	}{
		{"new kernel, memory cgroup", newKernelMemcg, []Event{{
			Time: boot.Add(5 * time.Second), PID: 4321, ProcessName: "stress",
			ContainerCgroup: "/kubepods/burstable/pod12-34/abc", VictimCgroup: "/kubepods/burstable/pod12-34",
		}}},
		{"new kernel, system OOM", newKernelGlobal, []Event{{
			Time: boot.Add(2 * time.Hour), PID: 777, ProcessName: "big app",
			ContainerCgroup: "/system.slice/big-app.service", VictimCgroup: "/",
		}}},
		{"old kernel, cgroup v1 limit", oldKernelMemcg, []Event{{
			Time: boot.Add(1234567890 * time.Microsecond), PID: 999, ProcessName: "python",
			ContainerCgroup: "/kubepods/podg-1/def", VictimCgroup: "/kubepods/podg-1",
		}}},
		{"several, with noise between", "6,1,1,-;eth0: link up\n" + oldKernelMemcg + "6,9,9,-;bridge: port 1 entered forwarding state\n" + newKernelMemcg, []Event{
			{Time: boot.Add(1234567890 * time.Microsecond), PID: 999, ProcessName: "python", ContainerCgroup: "/kubepods/podg-1/def", VictimCgroup: "/kubepods/podg-1"},
			{Time: boot.Add(5 * time.Second), PID: 4321, ProcessName: "stress", ContainerCgroup: "/kubepods/burstable/pod12-34/abc", VictimCgroup: "/kubepods/burstable/pod12-34"},
		}},
		{"a report cut before its last line is still reported at the next", strings.Join(strings.Split(newKernelMemcg, "\n")[:11], "\n") + "\n" + newKernelGlobal, []Event{
			{Time: boot.Add(5 * time.Second), PID: 4321, ProcessName: "stress", ContainerCgroup: "/kubepods/burstable/pod12-34/abc", VictimCgroup: "/kubepods/burstable/pod12-34"},
			{Time: boot.Add(2 * time.Hour), PID: 777, ProcessName: "big app", ContainerCgroup: "/system.slice/big-app.service", VictimCgroup: "/"},
		}},
		{"killed line without a report", "3,1,1,-;Out of memory: Killed process 5 (x) total-vm:1kB\n", nil},
		{"continuation lines are ignored", "4,1,1,-;a invoked oom-killer: gfp_mask=0\n SUBSYSTEM=memory\n DEVICE=+x\n3,2,2,-;Out of memory: Killed process 6 (a) total-vm:1kB\n", []Event{
			{Time: boot.Add(time.Microsecond), PID: 6, ProcessName: "a", ContainerCgroup: "/", VictimCgroup: "/"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := collect(t, tc.input); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestBareMessages(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(boot)
	var got []Event
	w, err := New(Config{Clock: clk, OnOOM: func(e Event) { got = append(got, e) }})
	if err != nil {
		t.Fatal(err)
	}
	// dmesg output: no kmsg header; dated by the clock.
	w.Feed("[ 5000.000000] stress invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=999")
	w.Feed("[ 5000.100000] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=stress,pid=12,uid=0")
	w.Feed("[ 5000.200000] Memory cgroup out of memory: Killed process 12 (stress) total-vm:1kB, anon-rss:1kB")
	want := []Event{{Time: boot, PID: 12, ProcessName: "stress", ContainerCgroup: "/a/b", VictimCgroup: "/a"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestUnreadableLogIsSkipped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, err := New(Config{Path: filepath.Join(t.TempDir(), "no-kmsg"), OnOOM: func(Event) { t.Error("event from nowhere") }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without OnOOM accepted")
	}
}

// TestFileLog reads a kmsg-format file through Path, from the start, until
// the context ends (a file reads EOF; /dev/kmsg would block).
func TestFileLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(p, []byte(newKernelMemcg), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []Event
	w, err := New(Config{Path: p, FromStart: true, BootTime: boot, OnOOM: func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e)
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].PID != 4321 {
		t.Errorf("got %+v", got)
	}
}

// TestDevKmsg opens the real /dev/kmsg where readable and stops with the
// context.
func TestDevKmsg(t *testing.T) {
	f, err := os.Open(DefaultPath)
	if err != nil {
		itest.Require(t, DefaultPath+" readable", err)
	}
	_ = f.Close()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	w, err := New(Config{OnOOM: func(e Event) { t.Logf("OOM kill on this machine: %+v", e) }})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

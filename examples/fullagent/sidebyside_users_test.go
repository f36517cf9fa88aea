package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
)

// usersProbe is what the hostUsers: false pod of the side-by-side test
// writes to its termination log: its uid, its uid_map, the groups of the
// service-account volume's files, the token's owner and mode inside, and
// whether it can read the token and write its emptyDir.
const usersProbe = "{ id -u; cat /proc/self/uid_map; stat -c %g $(find /var/run/secrets/kubernetes.io/serviceaccount/ -type f); " +
	"stat -L -c '%u %a' /var/run/secrets/kubernetes.io/serviceaccount/token; " +
	"cat /var/run/secrets/kubernetes.io/serviceaccount/token > /dev/null && echo token=readable; " +
	"echo x > /scratch/f && echo emptydir=writable; } > /dev/termination-log 2>&1"

// TestUserPodsSideBySide runs, on containerd 2 (which supports both), the
// supplementalGroupsPolicy and hostUsers: false pods on kubelet v1.37.2 and
// on fullagent at once, and asserts the same outcome: the same `id -G`,
// the same container status user, and the same view of the volumes from
// inside the user namespace.
func TestUserPodsSideBySide(t *testing.T) {
	client, agents := startSideBySide(t, agenttest.ContainerdVersion2)
	ctx := t.Context()
	for _, a := range agents {
		if err := waitNodeFeatures(ctx, client, a.node); err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
	}
	cases := map[string]func() *v1.Pod{
		"merge": func() *v1.Pod {
			p := groupsPod("merge", ptr.To(v1.SupplementalGroupsPolicyMerge))
			p.Spec.Containers[0].Command = []string{"sh", "-c", "id -G > /dev/termination-log"}
			return p
		},
		"strict": func() *v1.Pod {
			p := groupsPod("strict", ptr.To(v1.SupplementalGroupsPolicyStrict))
			p.Spec.Containers[0].Command = []string{"sh", "-c", "id -G > /dev/termination-log"}
			return p
		},
		"userns": func() *v1.Pod {
			p := usernsPod("userns")
			p.Spec.Containers[0].Command = []string{"sh", "-c", usersProbe}
			p.Spec.Containers[0].Image = agenttest.BusyboxImage
			return p
		},
	}
	for _, a := range agents {
		for _, mk := range cases {
			p := mk()
			p.Name, p.Namespace, p.Spec.NodeName = a.name+"-"+p.Name, "default", a.node
			if p.Spec.Containers[0].Image == "" {
				p.Spec.Containers[0].Image = agenttest.BusyboxImage
			}
			if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]map[string]usersOutcome{}
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		all := true
		for _, a := range agents {
			got[a.name] = map[string]usersOutcome{}
			for name := range cases {
				o := observeUsers(ctx, client, a.name+"-"+name)
				got[a.name][name] = o
				all = all && (o.phase == string(v1.PodSucceeded) || o.phase == string(v1.PodFailed))
			}
		}
		return all, nil
	})
	var table strings.Builder
	for _, name := range []string{"merge", "strict", "userns"} {
		for _, a := range agents {
			fmt.Fprintf(&table, "\n  %-6s %-9s %s", name, a.name, got[a.name][name])
		}
	}
	t.Logf("outcomes on kubelet v1.37.2 and fullagent (same pods, containerd 2):%s", table.String())

	want := map[string]usersOutcome{
		"merge":  {phase: "Succeeded", output: "1000 50000 60000\n", user: "{uid 1000 gid 1000 supplementalGroups [1000 50000 60000]}"},
		"strict": {phase: "Succeeded", output: "1000 60000\n", user: "{uid 1000 gid 1000 supplementalGroups [1000 60000]}"},
	}
	for name, w := range want {
		for _, a := range agents {
			if o := got[a.name][name]; o != w {
				t.Errorf("%s on %s: %s, want %s", name, a.name, o, w)
			}
		}
	}
	k, f := got["kubelet"]["userns"], got["fullagent"]["userns"]
	for who, o := range map[string]usersOutcome{"kubelet": k, "fullagent": f} {
		if o.phase != string(v1.PodSucceeded) || !podRangeUIDMap(o.output) {
			t.Errorf("userns on %s: %s, want Succeeded in a user namespace of its own", who, o)
		}
	}
	// The host range each agent gave its pod may differ; all else must not.
	if ko, fo := withoutUIDMap(k), withoutUIDMap(f); ko != fo {
		t.Errorf("userns: the agents differ:\n  kubelet:   %s\n  fullagent: %s", ko, fo)
	}
}

// usersOutcome is what the test records of a pod: its phase, the
// container's termination message and status user.
type usersOutcome struct {
	phase, output, user string
}

func (o usersOutcome) String() string {
	return fmt.Sprintf("phase=%s user=%s output=%q", o.phase, o.user, o.output)
}

func observeUsers(ctx context.Context, client kubernetes.Interface, name string) usersOutcome {
	p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return usersOutcome{phase: "<" + err.Error() + ">"}
	}
	o := usersOutcome{phase: string(p.Status.Phase)}
	if cs := containerStatus(p, "app"); cs != nil {
		o.user = userString(cs.User)
		if cs.State.Terminated != nil {
			o.output = cs.State.Terminated.Message
		}
	}
	return o
}

// podRangeUIDMap reports whether the output's second line is a uid_map of
// one 65536-ID range starting at container ID 0 and a non-zero host ID.
func podRangeUIDMap(output string) bool {
	lines := strings.Split(output, "\n")
	if len(lines) < 2 {
		return false
	}
	var inside, outside, length uint64
	if _, err := fmt.Sscan(lines[1], &inside, &outside, &length); err != nil {
		return false
	}
	return inside == 0 && outside != 0 && outside%65536 == 0 && length == 65536
}

// withoutUIDMap is the outcome with the output's uid_map line left out.
func withoutUIDMap(o usersOutcome) usersOutcome {
	lines := strings.Split(o.output, "\n")
	if len(lines) > 1 {
		o.output = strings.Join(append(lines[:1:1], lines[2:]...), "\n")
	}
	return o
}

// waitNodeFeatures waits for the node to declare supplementalGroupsPolicy
// support in its status.
func waitNodeFeatures(ctx context.Context, client kubernetes.Interface, node string) error {
	var last *v1.NodeFeatures
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n.Status.Features
		return last != nil && ptr.Deref(last.SupplementalGroupsPolicy, false), nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("node %s did not declare features.supplementalGroupsPolicy (last %+v)", node, last), err)
	}
	return nil
}

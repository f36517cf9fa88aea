package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agenttest"
)

// The agnhost image's user-defined-in-image (uid 1000, primary group 1000)
// is also in group-defined-in-image (gid 50000) in the image's /etc/group;
// the pods below add supplemental group 60000, as upstream's e2e test of
// supplementalGroupsPolicy does.
const (
	uidInImage        = 1000
	gidDefinedInImage = 50000
	podGroup          = 60000
)

// groupsPod runs agnhost as uid 1000 with supplementalGroups [60000] and
// the given supplementalGroupsPolicy (nil: unset, which is Merge).
func groupsPod(name string, policy *v1.SupplementalGroupsPolicy) *v1.Pod {
	p := simplePod(name, v1.RestartPolicyNever, "id -G; exec sleep 3600")
	p.Spec.Containers[0].Image = agenttest.AgnhostImage
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	p.Spec.SecurityContext = &v1.PodSecurityContext{
		RunAsUser: ptr.To[int64](uidInImage), SupplementalGroups: []int64{podGroup}, SupplementalGroupsPolicy: policy,
	}
	return p
}

// usernsPod runs busybox as uid 1000 in a user namespace of its own
// (hostUsers: false) with an emptyDir at /scratch; the API server's
// ServiceAccount admission adds the projected kube-api-access volume
// (token, the kube-root-ca.crt configMap, the namespace).
func usernsPod(name string) *v1.Pod {
	p := simplePod(name, v1.RestartPolicyNever, "exec sleep 3600")
	p.Spec.HostUsers = ptr.To(false)
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](1)
	p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](uidInImage)}
	p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	return p
}

// TestPodSecurityContainerd2 runs, through the whole agent on containerd 2
// (runc 1.5), what containerd 1.6 cannot do (TestPodSecurity checks the
// refusals of the same pods there): supplementalGroupsPolicy Merge and
// Strict, with the container's user in its status as upstream reports it,
// and a hostUsers: false pod whose volumes its non-root user can read.
func TestPodSecurityContainerd2(t *testing.T) {
	e := startEnv(t, envOption{containerd: agenttest.ContainerdVersion2})
	if !e.cri.HasImage(agenttest.AgnhostImage) {
		agenttest.RequireIntegration(t, "agnhost image", errors.New("no agnhost image (build _output/bin/agnhost)"))
	}
	// Admission reads the node's features: wait for the agent to publish
	// containerd 2's, or a Strict pod would be refused for want of them.
	if err := waitNodeFeatures(t.Context(), e.client, testNode); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		policy *v1.SupplementalGroupsPolicy
		groups []int64
	}{
		{"Merge: the image's groups of the user are added", ptr.To(v1.SupplementalGroupsPolicyMerge), []int64{uidInImage, gidDefinedInImage, podGroup}},
		{"unset is Merge", nil, []int64{uidInImage, gidDefinedInImage, podGroup}},
		{"Strict: only the pod's groups", ptr.To(v1.SupplementalGroupsPolicyStrict), []int64{uidInImage, podGroup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "groups-unset"
			if tc.policy != nil {
				name = "groups-" + strings.ToLower(string(*tc.policy))
			}
			p := groupsPod(name, tc.policy)
			e.createPod(t, p)
			got := e.waitPod(t, p.Name, time.Minute, "Running with status.user", func(p *v1.Pod) bool {
				cs := containerStatus(p, "app")
				return cs != nil && cs.State.Running != nil && cs.User != nil
			})
			want := &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: uidInImage, GID: uidInImage, SupplementalGroups: tc.groups}}
			if u := containerStatus(got, "app").User; !apiequality.Semantic.DeepEqual(u, want) {
				t.Errorf("status.user %s, want %s", userString(u), userString(want))
			}
			wantID := strings.Trim(fmt.Sprint(tc.groups), "[]")
			if out := strings.TrimSpace(e.exec(t, got, "app", "id", "-G")); out != wantID {
				t.Errorf("id -G in the container: %q, want %q", out, wantID)
			}
			if err := e.client.CoreV1().Pods("default").Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("hostUsers false: own user namespace, volumes readable by the pod's user", func(t *testing.T) {
		p := usernsPod("userns")
		e.createPod(t, p)
		got := e.waitPod(t, p.Name, time.Minute, "Running", func(p *v1.Pod) bool {
			cs := containerStatus(p, "app")
			return cs != nil && cs.State.Running != nil
		})
		var inside, outside, length uint64
		uidMap := e.exec(t, got, "app", "cat", "/proc/self/uid_map")
		if _, err := fmt.Sscan(uidMap, &inside, &outside, &length); err != nil {
			t.Fatalf("uid_map %q: %v", uidMap, err)
		}
		if inside != 0 || outside == 0 || length != 65536 || outside%65536 != 0 {
			t.Errorf("uid_map %q, want 0 -> a non-zero multiple of 65536, length 65536 (not the identity map)", uidMap)
		}
		if out := strings.TrimSpace(e.exec(t, got, "app", "id", "-u")); out != fmt.Sprint(uidInImage) {
			t.Errorf("id -u %q, want %d", out, uidInImage)
		}
		if out := e.exec(t, got, "app", "sh", "-c", "echo written > /scratch/f && cat /scratch/f"); strings.TrimSpace(out) != "written" {
			t.Errorf("emptyDir write and read back as uid %d: %q", uidInImage, out)
		}
		const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
		// The token is 0600 and owned by the pod's user (its only user):
		// readable only because the mount is idmapped, so that the host
		// owner 1000 is 1000 inside the namespace too.
		if out := strings.TrimSpace(e.exec(t, got, "app", "stat", "-L", "-c", "%u %a", sa+"/token")); out != "1000 600" {
			t.Errorf("token owner and mode inside: %q, want \"1000 600\"", out)
		}
		if tok := strings.TrimSpace(e.exec(t, got, "app", "cat", sa+"/token")); strings.Count(tok, ".") != 2 {
			t.Errorf("token read as uid %d: %q, want a JWT", uidInImage, tok)
		}
		if ca := e.exec(t, got, "app", "cat", sa+"/ca.crt"); !strings.HasPrefix(ca, "-----BEGIN CERTIFICATE-----") {
			t.Errorf("projected configMap ca.crt read as uid %d: %q", uidInImage, ca)
		}
		if ns := e.exec(t, got, "app", "cat", sa+"/namespace"); ns != "default" {
			t.Errorf("projected downwardAPI namespace: %q", ns)
		}
		// As upstream's e2e "should mount all volumes with proper
		// permissions with hostUsers=false": the agent's files (token,
		// ca.crt, namespace) belong to group 0 inside, not the overflow ID.
		if out := e.exec(t, got, "app", "sh", "-c", "stat -c %g $(find "+sa+"/ -type f)"); out != "0\n0\n0\n" {
			t.Errorf("groups of the projected volume's files inside: %q, want three 0s", out)
		}
	})

	t.Run("hostUsers false with fsGroup: volume files in the fsGroup inside", func(t *testing.T) {
		// As upstream's e2e "should set FSGroup to user inside the
		// container with hostUsers=false".
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "userns-cfg"}, Data: map[string]string{"a": "1", "b": "2"}}
		if _, err := e.client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := usernsPod("userns-fsgroup")
		p.Spec.SecurityContext.FSGroup = ptr.To[int64](200)
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{
			ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: cm.Name}}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, v1.VolumeMount{Name: "cfg", MountPath: "/vol/cfg"})
		e.createPod(t, p)
		got := e.waitPod(t, p.Name, time.Minute, "Running", func(p *v1.Pod) bool {
			cs := containerStatus(p, "app")
			return cs != nil && cs.State.Running != nil
		})
		if out := e.exec(t, got, "app", "sh", "-c", "stat -c %g $(find /vol/cfg/ -type f)"); out != "200\n200\n" {
			t.Errorf("groups of the configMap's files inside: %q, want 200 for both", out)
		}
		if out := strings.TrimSpace(e.exec(t, got, "app", "stat", "-c", "%g", "/scratch")); out != "200" {
			t.Errorf("group of the emptyDir inside: %q, want 200", out)
		}
	})
}

func userString(u *v1.ContainerUser) string {
	if u == nil || u.Linux == nil {
		return fmt.Sprintf("%+v", u)
	}
	return fmt.Sprintf("{uid %d gid %d supplementalGroups %v}", u.Linux.UID, u.Linux.GID, u.Linux.SupplementalGroups)
}

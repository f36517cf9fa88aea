package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/agenttest"
)

// privateRegistry is the registry name TestImagePulls serves from a
// registry with htpasswd authentication.
const privateRegistry = "private.nodekit.test"

// TestImagePulls runs pods whose images come from local registries
// (containerd mirrors for registry.k8s.io and the others, and one private
// name behind a password) instead of being imported beforehand: the pull
// policies, pull secrets and pull failures, as a kubelet does them.
func TestImagePulls(t *testing.T) {
	public := agenttest.StartRegistry(t)
	private := agenttest.StartRegistry(t, agenttest.WithRegistryUsers(map[string]string{"alice": "s3cret"}))
	privateImage := privateRegistry + "/team/busybox:1.0"
	private.Push(agenttest.BusyboxImage, privateImage)
	e := startEnv(t, envOption{cri: []agenttest.ContainerdOption{
		agenttest.WithRegistryMirror(public), agenttest.WithRegistryMirror(private, privateRegistry),
	}})
	if e.cri.HasImage(agenttest.BusyboxImage) {
		t.Fatal("busybox was imported; with mirrors it must be pulled")
	}
	images := criImages(t, e.cri.Socket)
	t.Cleanup(func() {
		if t.Failed() {
			e.logEvents(t)
		}
	})

	t.Run("Always pulls", func(t *testing.T) {
		p := simplePod("pull-always", v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
		e.createPod(t, p)
		e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.waitEvent(t, p.Name, "Pulling", `Pulling image "`+agenttest.BusyboxImage+`"`)
		pulled := e.eventMessage(t, p.Name, "Pulled")
		m := regexp.MustCompile(`^Successfully pulled image "` + regexp.QuoteMeta(agenttest.BusyboxImage) +
			`" in [0-9.]+m?s \([0-9.]+m?s including waiting\)\. Image size: ([0-9]+) bytes\.$`).FindStringSubmatch(pulled)
		if m == nil {
			t.Fatalf("Pulled event %q is not upstream's", pulled)
		}
		if size, _ := strconv.Atoi(m[1]); size <= 0 {
			t.Errorf("Pulled event size %s", m[1])
		}
		if id := images.id(t, agenttest.BusyboxImage); id != public.ImageID(agenttest.BusyboxImage) {
			t.Errorf("CRI image %s = %q, want the pushed %s", agenttest.BusyboxImage, id, public.ImageID(agenttest.BusyboxImage))
		}
		if n := manifestRequests(t, public, "e2e-test-images/busybox"); n == 0 {
			t.Error("the registry saw no manifest request for busybox")
		}
	})

	t.Run("IfNotPresent does not pull a present image", func(t *testing.T) {
		before := manifestRequests(t, public, "e2e-test-images/busybox")
		p := simplePod("pull-ifnotpresent", v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
		e.createPod(t, p)
		e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.waitEvent(t, p.Name, "Pulled", `Container image "`+agenttest.BusyboxImage+`" already present on machine`)
		if msg := e.eventMessage(t, p.Name, "Pulling"); msg != "" {
			t.Errorf("a Pulling event for a present image: %q", msg)
		}
		if after := manifestRequests(t, public, "e2e-test-images/busybox"); after != before {
			t.Errorf("manifest requests for busybox went from %d to %d", before, after)
		}
	})

	t.Run("Never with the image absent", func(t *testing.T) {
		p := simplePod("pull-never", v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Image = agenttest.NonRootImage
		p.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		e.createPod(t, p)
		got := e.waitPod(t, p.Name, 60*time.Second, "ErrImageNeverPull", waitingReason("app", "ErrImageNeverPull"))
		want := `Container image "` + agenttest.NonRootImage + `" is not present with pull policy of Never`
		if msg := containerStatus(got, "app").State.Waiting.Message; msg != want {
			t.Errorf("message %q, want %q", msg, want)
		}
		if n := manifestRequests(t, public, "e2e-test-images/nonroot"); n != 0 {
			t.Errorf("the registry saw %d manifest requests for nonroot", n)
		}
	})

	t.Run("private without a pull secret", func(t *testing.T) {
		p := simplePod("private-nosecret", v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Image = privateImage
		e.createPod(t, p)
		got := e.waitPod(t, p.Name, 60*time.Second, "ErrImagePull", waitingReason("app", "ErrImagePull"))
		if msg := containerStatus(got, "app").State.Waiting.Message; !strings.Contains(msg, "401 Unauthorized") && !strings.Contains(msg, "authorization failed") {
			t.Errorf("ErrImagePull message %q does not say the registry refused", msg)
		}
		e.waitEvent(t, p.Name, "Failed", `Failed to pull image "`+privateImage+`": `)
		got = e.waitPod(t, p.Name, 60*time.Second, "ImagePullBackOff", waitingReason("app", "ImagePullBackOff"))
		want := `Back-off pulling image "` + privateImage + `": ErrImagePull: `
		if msg := containerStatus(got, "app").State.Waiting.Message; !strings.HasPrefix(msg, want) || len(msg) == len(want) {
			t.Errorf("ImagePullBackOff message %q, want %q and the last pull's error", msg, want)
		}
		e.waitEvent(t, p.Name, "BackOff", `Back-off pulling image "`+privateImage+`"`)
	})

	t.Run("private with a pull secret", func(t *testing.T) {
		e.createPullSecret(t, "regcred", privateRegistry, "alice", "s3cret")
		p := simplePod("private-secret", v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Image = privateImage
		p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		e.createPod(t, p)
		e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.waitEvent(t, p.Name, "Pulled", `Successfully pulled image "`+privateImage+`"`)
	})

	t.Run("pull duration metric", func(t *testing.T) {
		var total float64
		err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			m, err := e.scrape(ctx, "metrics")
			if err != nil {
				return false, nil
			}
			total = 0
			for series, v := range m {
				if strings.HasPrefix(series, "kubelet_image_pull_duration_seconds_count") {
					total += v
				}
			}
			return total >= 2, nil
		})
		if err != nil {
			t.Fatalf("kubelet_image_pull_duration_seconds_count = %v, want at least 2 (two pulls)", total)
		}
	})
}

// logEvents logs every event of the namespace, for a failed test.
func (e *env) logEvents(t *testing.T) {
	evs, err := e.client.CoreV1().Events("default").List(context.WithoutCancel(t.Context()), metav1.ListOptions{})
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	for _, ev := range evs.Items {
		t.Logf("event %s %s %s: %s", ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
	}
}

// waitingReason is a waitPod condition: container name waits with reason.
func waitingReason(name, reason string) func(*v1.Pod) bool {
	return func(p *v1.Pod) bool {
		cs := containerStatus(p, name)
		return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == reason
	}
}

// eventMessage returns the message of the pod's latest event with reason,
// "" if there is none.
func (e *env) eventMessage(t *testing.T, pod, reason string) string {
	t.Helper()
	evs, err := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msg := ""
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Name == pod && ev.Reason == reason {
			msg = ev.Message
		}
	}
	return msg
}

// createPullSecret creates a kubernetes.io/dockerconfigjson secret for
// registry.
func (e *env) createPullSecret(t *testing.T, name, registry, user, password string) {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{registry: map[string]string{"username": user, "password": password}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: cfg}}
	if _, err := e.client.CoreV1().Secrets("default").Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// manifestRequests counts the manifest requests for repo in the
// registry's access log.
func manifestRequests(t *testing.T, reg *agenttest.Registry, repo string) int {
	t.Helper()
	data, err := os.ReadFile(reg.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, " /v2/"+repo+"/manifests/") && strings.Contains(line, `"containerd/`) {
			n++
		}
	}
	return n
}

// criImageClient asks the test's containerd about images.
type criImageClient struct{ c runtimeapi.ImageServiceClient }

func criImages(t *testing.T, socket string) criImageClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return criImageClient{c: runtimeapi.NewImageServiceClient(conn)}
}

// id is the CRI's image ID for ref, "" when absent.
func (c criImageClient) id(t *testing.T, ref string) string {
	t.Helper()
	st, err := c.c.ImageStatus(t.Context(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("CRI ImageStatus %s: %v", ref, err)
	}
	return st.GetImage().GetId()
}

// TestImagePullsParallel starts pods whose images all must be pulled at
// once and counts, at the registry, how many pulls ran together: one with
// serializeImagePulls (the default), maxParallelImagePulls with it off.
func TestImagePullsParallel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		want   int
	}{
		{name: "serialized", config: "", want: 1},
		{name: "two in parallel", config: "serializeImagePulls: false\nmaxParallelImagePulls: 2\n", want: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := agenttest.StartRegistry(t, agenttest.WithRegistryPullDelay(time.Second))
			e := startEnv(t, envOption{config: tc.config, cri: []agenttest.ContainerdOption{agenttest.WithRegistryMirror(reg)}})
			// Images the registry has, each pulled by its own pod: pause
			// is imported for sandboxes but Always pulls it again.
			var pods []*v1.Pod
			for i, image := range []string{agenttest.BusyboxImage, agenttest.NonRootImage, "registry.k8s.io/pause:3.10.2", agenttest.AgnhostImage} {
				if reg.ImageID(image) == "" {
					continue
				}
				p := simplePod("pull-"+strconv.Itoa(i), v1.RestartPolicyAlways, "sleep 3600")
				p.Spec.Containers[0].Image = image
				p.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
				pods = append(pods, p)
			}
			if len(pods) < 3 {
				t.Fatalf("the registry holds %d of the images, want at least 3", len(pods))
			}
			for _, p := range pods {
				e.createPod(t, p)
			}
			for _, p := range pods {
				e.waitPod(t, p.Name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
			}
			if got := reg.MaxConcurrentPulls(); got != tc.want {
				t.Errorf("%d pods: at most %d pulls at once at the registry, want %d", len(pods), got, tc.want)
			}
		})
	}
}

// TestImagePullsQPS: with registryPullQPS 1 and registryBurst 1, of
// pulls asked for within a second all but the first fail with upstream's "pull
// QPS exceeded" and succeeds after its back-off.
func TestImagePullsQPS(t *testing.T) {
	reg := agenttest.StartRegistry(t)
	e := startEnv(t, envOption{config: "registryPullQPS: 1\nregistryBurst: 1\n", cri: []agenttest.ContainerdOption{agenttest.WithRegistryMirror(reg)}})
	var pods []*v1.Pod
	for i, image := range []string{agenttest.BusyboxImage, agenttest.NonRootImage, "registry.k8s.io/pause:3.10.2"} {
		p := simplePod("qps-"+strconv.Itoa(i), v1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Image = image
		p.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
		pods = append(pods, p)
		e.createPod(t, p)
	}
	throttled := ""
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		// Any of a pod's Failed events: the pull's own ("Failed to pull
		// image ...: pull QPS exceeded") is followed by "Error: ErrImagePull".
		evs, err := e.client.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Failed" && strings.HasSuffix(ev.Message, ": pull QPS exceeded") {
				throttled = ev.InvolvedObject.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("no pull failed with pull QPS exceeded")
	}
	for _, p := range pods {
		e.waitPod(t, p.Name, 90*time.Second, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	}
	e.waitEvent(t, throttled, "Pulled", "Successfully pulled image")
}

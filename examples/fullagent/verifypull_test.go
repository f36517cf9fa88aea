package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/agenttest"
	"github.com/nodekit/nodekit/pullrecords"
)

// TestVerifiedPulls: a private image one pod pulled with its pull secret
// is not handed to a pod without the secret under kubelet's default
// policy (NeverVerifyPreloadedImages, KubeletEnsureSecretPulledImages on):
// that pod pulls itself and is refused by the registry; a pod with the
// secret reuses the node's copy without a registry pull. The records are
// kubelet's files under the root dir.
func TestVerifiedPulls(t *testing.T) {
	private, image := startPrivateRegistry(t)
	pod := func(name, secret string) *v1.Pod { return privatePod(image, name, secret) }
	running := podRunning
	const repo = privateRepo

	e := startEnv(t, envOption{cri: []agenttest.ContainerdOption{agenttest.WithRegistryMirror(private, privateRegistry)}})
	t.Cleanup(func() {
		if t.Failed() {
			e.logEvents(t)
		}
	})
	e.createPullSecret(t, "regcred", privateRegistry, "alice", "s3cret")

	e.createPod(t, pod("with-secret", "regcred"))
	e.waitPod(t, "with-secret", 90*time.Second, "Running", running)
	e.waitEvent(t, "with-secret", "Pulled", `Successfully pulled image "`+image+`"`)
	imageID := private.ImageID(agenttest.BusyboxImage)

	t.Run("records are kubelet's files", func(t *testing.T) {
		// What a restarted agent (or kubelet) reads back from the root dir.
		b, err := os.ReadFile(filepath.Join(e.rootDir, "image_manager", "pulled", hashFileName(imageID)))
		if err != nil {
			t.Fatalf("no pulled record for %s: %v", imageID, err)
		}
		for _, want := range []string{`"kind":"ImagePulledRecord"`, `"apiVersion":"kubelet.config.k8s.io/v1beta1"`,
			`"imageRef":"` + imageID + `"`, `"` + privateRegistry + `/team/busybox":{"kubernetesSecrets":[{`, `"namespace":"default","name":"regcred"`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("record %s lacks %s", b, want)
			}
		}
		left, err := os.ReadDir(filepath.Join(e.rootDir, "image_manager", "pulling"))
		if err != nil || len(left) != 0 {
			t.Errorf("pull intents left after the pull: %v %v", left, err)
		}
		v, err := pullrecords.New(t.Context(), pullrecords.Config{RootDir: e.rootDir})
		if err != nil {
			t.Fatal(err)
		}
		if !v.MustPull(t.Context(), image, imageID, nil) {
			t.Error("records read back from the root dir let a pod without the secret use the image")
		}
	})

	t.Run("a pod without the secret pulls and is refused", func(t *testing.T) {
		before := manifestRequests(t, private, repo)
		e.createPod(t, pod("no-secret", ""))
		got := e.waitPod(t, "no-secret", 90*time.Second, "ErrImagePull or ImagePullBackOff", func(p *v1.Pod) bool {
			return waitingReason("app", "ErrImagePull")(p) || waitingReason("app", "ImagePullBackOff")(p)
		})
		if msg := containerStatus(got, "app").State.Waiting.Message; !strings.Contains(msg, "401 Unauthorized") && !strings.Contains(msg, "authorization failed") {
			t.Errorf("message %q does not say the registry refused", msg)
		}
		e.waitEvent(t, "no-secret", "Failed", `Failed to pull image "`+image+`": `)
		if msg := e.eventMessage(t, "no-secret", "Pulled"); msg != "" {
			t.Errorf("the pod without the secret was given the node's image: %q", msg)
		}
		if after := manifestRequests(t, private, repo); after == before {
			t.Error("the registry saw no pull from the pod without the secret")
		}
	})

	t.Run("a pod with the secret reuses the image without a pull", func(t *testing.T) {
		before := manifestRequests(t, private, repo)
		e.createPod(t, pod("same-secret", "regcred"))
		e.waitPod(t, "same-secret", 90*time.Second, "Running", running)
		e.waitEvent(t, "same-secret", "Pulled", `Container image "`+image+`" already present on machine and can be accessed by the pod`)
		if after := manifestRequests(t, private, repo); after != before {
			t.Errorf("manifest requests went from %d to %d: the pod with the secret pulled again", before, after)
		}
	})

	t.Run("the records survive a restart of the agent", func(t *testing.T) {
		// A record of an image that left the node while the agent was
		// down (kubelet's file, as it writes one) is pruned at start.
		gone := "sha256:" + strings.Repeat("0", 64)
		stale := filepath.Join(e.rootDir, "image_manager", "pulled", hashFileName(gone))
		writeFile(t, stale, `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2026-01-01T00:00:00Z","imageRef":"`+gone+`","credentialMapping":{"gone.example/app":{"nodePodsAccessible":true}}}`)
		e.restartAgent(t)
		e.createPod(t, pod("restart-no-secret", ""))
		e.waitPod(t, "restart-no-secret", 90*time.Second, "ErrImagePull or ImagePullBackOff", func(p *v1.Pod) bool {
			return waitingReason("app", "ErrImagePull")(p) || waitingReason("app", "ImagePullBackOff")(p)
		})
		// The agent has started (it ran the pod): the prune is behind it.
		if _, err := os.Stat(stale); !os.IsNotExist(err) {
			t.Errorf("the record of an image not on the node survived the start: %v", err)
		}
		before := manifestRequests(t, private, repo)
		e.createPod(t, pod("restart-secret", "regcred"))
		e.waitPod(t, "restart-secret", 90*time.Second, "Running", running)
		e.waitEvent(t, "restart-secret", "Pulled", `Container image "`+image+`" already present on machine and can be accessed by the pod`)
		if after := manifestRequests(t, private, repo); after != before {
			t.Errorf("manifest requests went from %d to %d: after the restart the pod with the secret pulled again", before, after)
		}
	})

}

// TestVerifiedPullsNeverVerify: with imagePullCredentialsVerificationPolicy
// NeverVerify, a pod without the secret gets the image another pod pulled
// with it, without a pull, as kubelet.
func TestVerifiedPullsNeverVerify(t *testing.T) {
	private, image := startPrivateRegistry(t)
	e := startEnv(t, envOption{config: "imagePullCredentialsVerificationPolicy: NeverVerify\n",
		cri: []agenttest.ContainerdOption{agenttest.WithRegistryMirror(private, privateRegistry)}})
	t.Cleanup(func() {
		if t.Failed() {
			e.logEvents(t)
		}
	})
	e.createPullSecret(t, "regcred", privateRegistry, "alice", "s3cret")
	e.createPod(t, privatePod(image, "with-secret", "regcred"))
	e.waitPod(t, "with-secret", 90*time.Second, "Running", podRunning)
	before := manifestRequests(t, private, privateRepo)
	e.createPod(t, privatePod(image, "no-secret", ""))
	e.waitPod(t, "no-secret", 90*time.Second, "Running", podRunning)
	e.waitEvent(t, "no-secret", "Pulled", `Container image "`+image+`" already present on machine and can be accessed by the pod`)
	if after := manifestRequests(t, private, privateRepo); after != before {
		t.Errorf("manifest requests went from %d to %d under NeverVerify", before, after)
	}
}

// privateRepo is the repository of the private image of the verified-pull
// tests.
const privateRepo = "team/busybox"

// startPrivateRegistry starts a registry with htpasswd authentication
// (alice:s3cret) holding busybox as a private image, and returns it and
// the image's name.
func startPrivateRegistry(t *testing.T) (*agenttest.Registry, string) {
	private := agenttest.StartRegistry(t, agenttest.WithRegistryUsers(map[string]string{"alice": "s3cret"}))
	image := privateRegistry + "/" + privateRepo + ":1.0"
	private.Push(agenttest.BusyboxImage, image)
	return private, image
}

// privatePod runs image with pull policy IfNotPresent and, unless "",
// the pull secret.
func privatePod(image, name, secret string) *v1.Pod {
	p := simplePod(name, v1.RestartPolicyAlways, "sleep 3600")
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	if secret != "" {
		p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: secret}}
	}
	return p
}

func podRunning(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning }

// hashFileName is the name kubelet gives a record file: sha256- and the
// hex SHA-256 of the image ID.
func hashFileName(s string) string {
	return fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(s)))
}

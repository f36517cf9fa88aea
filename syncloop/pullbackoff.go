package syncloop

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit"
)

// Image-pull back-off, as upstream's image manager keeps it: one back-off
// per pod and image (the reference as the spec writes it), whether the
// image is a container's or an image volume's. While it runs, no container
// of the pod that needs the image is handed to the runtime, so nothing
// pulls it again: neither that container, nor another one with the same
// image or mounting an image volume of it. The runtime pulls an image
// volume only for a container that mounts it (criruntime), so a container
// that mounts none starts without touching the volume's image.
//
// Divergence: upstream asks the back-off only when it would pull (policy
// Always, or the image absent); here a container waits out its image's
// back-off even if the image became present meanwhile (another pod pulled
// it), since the loop does not see the runtime's images.

// pullKey names the image-pull back-off of image in pod.
func pullKey(pod *v1.Pod, image string) string { return string(pod.UID) + "_" + image }

// pulledImages are the images container c needs pulled before it starts:
// its own, then those of the pod's image volumes it mounts.
func pulledImages(pod *v1.Pod, c *v1.Container) []string {
	out := []string{c.Image}
	for _, vm := range c.VolumeMounts {
		for i := range pod.Spec.Volumes {
			vol := &pod.Spec.Volumes[i]
			if vol.Name == vm.Name && vol.Image != nil {
				out = append(out, vol.Image.Reference)
			}
		}
	}
	return out
}

// pullFailed starts or grows the back-off of the image a pull failure of
// container c was about, and keeps its message for the back-off's. seen
// holds the keys this sync already grew: two containers whose pull of one
// image failed in the same sync grow its back-off once.
func (s *syncer) pullFailed(pod *v1.Pod, c *v1.Container, ae *nodekit.ActionError, seen map[string]bool) {
	image := c.Image
	if ae.Image != "" {
		image = ae.Image
	}
	key := pullKey(pod, image)
	if seen[key] {
		return
	}
	seen[key] = true
	s.pull.Next(key)
	s.reasonMu.Lock()
	defer s.reasonMu.Unlock()
	if s.pullErrs == nil {
		s.pullErrs = map[string]string{}
	}
	// As upstream: "REASON: MESSAGE" of the failed pull.
	s.pullErrs[key] = fmt.Sprintf("%s: %s", ae.Reason, ae.Message)
}

// holdForPull reports whether container c waits for an image-pull
// back-off, and how long it has left. When it does, it records upstream's
// waiting reason and message (`Back-off pulling image "X": ErrImagePull:
// ...`) and events: a Normal BackOff and a Warning Failed
// "Error: ImagePullBackOff".
func (s *syncer) holdForPull(pod *v1.Pod, c *v1.Container) (bool, time.Duration) {
	for _, image := range pulledImages(pod, c) {
		key := pullKey(pod, image)
		in, left := s.pull.InBackoff(key)
		if !in {
			continue
		}
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		s.events.Eventf(pod, v1.EventTypeNormal, "BackOff", "%s", msg)
		s.events.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %s", nodekit.ErrImagePullBackOff)
		s.reasonMu.Lock()
		prev, ok := s.pullErrs[key]
		s.reasonMu.Unlock()
		if ok {
			msg += ": " + prev
		}
		volumeImage := ""
		if image != c.Image {
			volumeImage = image
		}
		s.setReason(pod.UID, c.Name, &waitReason{Reason: string(nodekit.ErrImagePullBackOff), Message: msg, Image: volumeImage})
		return true, left
	}
	return false, 0
}

// forgetPulls drops the kept pull messages of a pod. The caller holds
// s.reasonMu.
func (s *syncer) forgetPullsLocked(pod string) {
	for k := range s.pullErrs {
		if strings.HasPrefix(k, pod+"_") {
			delete(s.pullErrs, k)
		}
	}
}

package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/shutdown"
	"github.com/nodekit/nodekit/syncloop"
)

// newShutdown builds the graceful node shutdown manager from
// shutdownGracePeriod, shutdownGracePeriodCriticalPods and
// shutdownGracePeriodByPodPriority (off when none is set, as upstream).
// loop returns the sync loop, which exists once the agent runs.
func (a *agent) newShutdown(cfg *kubeletv1beta1.KubeletConfiguration, recorder record.EventRecorder, loop func() *syncloop.Loop) (*shutdown.Manager, error) {
	groups, err := shutdown.Groups(shutdown.GracePeriodConfig{
		ShutdownGracePeriod:              cfg.ShutdownGracePeriod.Duration,
		ShutdownGracePeriodCriticalPods:  cfg.ShutdownGracePeriodCriticalPods.Duration,
		ShutdownGracePeriodByPodPriority: cfg.ShutdownGracePeriodByPodPriority,
	})
	if err != nil {
		return nil, err // names the field
	}
	return shutdown.New(shutdown.Config{
		Groups:     groups,
		ActivePods: func() []*v1.Pod { return loop().ActivePods() },
		Killer: shutdown.PodKillerFunc(func(ctx context.Context, p *v1.Pod, grace int64, st func(*v1.PodStatus)) error {
			return loop().KillPod(ctx, p, grace, st)
		}),
		Cleanup: shutdown.CleanupFunc(func(ctx context.Context, p *v1.Pod) bool { return loop().PodCleanedUp(ctx, p) }),
		SyncNodeStatus: func(ctx context.Context) error {
			if a.node == nil {
				return nil
			}
			return a.node.SyncOnce(ctx)
		},
		Events:  recorder,
		NodeRef: &v1.ObjectReference{Kind: "Node", Name: a.nodeName, UID: types.UID(a.nodeName)},
	})
}

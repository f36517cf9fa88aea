package shutdown

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Priorities of the two groups built from shutdownGracePeriod and
// shutdownGracePeriodCriticalPods, as upstream: every pod below
// SystemCriticalPriority is in the first group.
const (
	// DefaultPriority is the priority of a pod without one (upstream's
	// DefaultPriorityWhenNoDefaultClassExists).
	DefaultPriority int32 = 0
	// SystemCriticalPriority is the lowest priority of the system-critical
	// classes (system-cluster-critical; system-node-critical is 1000 more).
	SystemCriticalPriority int32 = 2_000_000_000
)

// GracePeriodConfig holds the three KubeletConfiguration fields that
// configure graceful node shutdown. Set either the first two or the last.
type GracePeriodConfig struct {
	// ShutdownGracePeriod is the time the whole shutdown may take.
	ShutdownGracePeriod time.Duration
	// ShutdownGracePeriodCriticalPods is the part of ShutdownGracePeriod
	// kept for critical pods, which are stopped last.
	ShutdownGracePeriodCriticalPods time.Duration
	// ShutdownGracePeriodByPodPriority gives a grace period per priority
	// class value instead.
	ShutdownGracePeriodByPodPriority []kubeletv1beta1.ShutdownGracePeriodByPodPriority
}

// Group is one step of a shutdown: pods whose priority is at least
// Priority (and below the next group's) are stopped together and given at
// most GracePeriodSeconds.
type Group struct {
	Priority           int32
	GracePeriodSeconds int64
}

// Groups turns the configuration into groups sorted by priority, lowest
// first. No groups (nil, nil) means graceful shutdown is disabled: both
// durations are zero and no per-priority list is given.
//
// From the two durations it makes two groups, as upstream: priority 0 gets
// ShutdownGracePeriod minus ShutdownGracePeriodCriticalPods, priority
// SystemCriticalPriority gets ShutdownGracePeriodCriticalPods (whole
// seconds). Errors name the offending field.
func Groups(c GracePeriodConfig) ([]Group, error) {
	var errs []error
	checkDuration := func(field string, d time.Duration) {
		if d < 0 || (d > 0 && d < time.Second) {
			errs = append(errs, fmt.Errorf("%s %v must be either zero or at least 1s", field, d))
		}
	}
	checkDuration("shutdownGracePeriod", c.ShutdownGracePeriod)
	checkDuration("shutdownGracePeriodCriticalPods", c.ShutdownGracePeriodCriticalPods)
	if c.ShutdownGracePeriodCriticalPods > c.ShutdownGracePeriod {
		errs = append(errs, fmt.Errorf("shutdownGracePeriodCriticalPods %v must be <= shutdownGracePeriod %v",
			c.ShutdownGracePeriodCriticalPods, c.ShutdownGracePeriod))
	}
	if len(c.ShutdownGracePeriodByPodPriority) > 0 && (c.ShutdownGracePeriod != 0 || c.ShutdownGracePeriodCriticalPods != 0) {
		errs = append(errs, errors.New("shutdownGracePeriodByPodPriority cannot be set together with shutdownGracePeriod or shutdownGracePeriodCriticalPods"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(c.ShutdownGracePeriodByPodPriority) > 0 {
		groups := make([]Group, 0, len(c.ShutdownGracePeriodByPodPriority))
		for _, p := range c.ShutdownGracePeriodByPodPriority {
			groups = append(groups, Group{Priority: p.Priority, GracePeriodSeconds: p.ShutdownGracePeriodSeconds})
		}
		return sortGroups(groups, "shutdownGracePeriodByPodPriority")
	}
	if c.ShutdownGracePeriod == 0 {
		return nil, nil
	}
	total := int64(c.ShutdownGracePeriod / time.Second)
	critical := int64(c.ShutdownGracePeriodCriticalPods / time.Second)
	return []Group{
		{Priority: DefaultPriority, GracePeriodSeconds: total - critical},
		{Priority: SystemCriticalPriority, GracePeriodSeconds: critical},
	}, nil
}

// sortGroups validates groups (no negative period, no priority twice) and
// returns a sorted copy. field names the configuration in errors.
func sortGroups(groups []Group, field string) ([]Group, error) {
	var errs []error
	seen := map[int32]int{}
	for i, g := range groups {
		if g.GracePeriodSeconds < 0 {
			errs = append(errs, fmt.Errorf("%s[%d].shutdownGracePeriodSeconds %d must not be negative", field, i, g.GracePeriodSeconds))
		}
		if j, dup := seen[g.Priority]; dup {
			errs = append(errs, fmt.Errorf("%s[%d].priority %d repeats %s[%d]", field, i, g.Priority, field, j))
		} else {
			seen[g.Priority] = i
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := slices.Clone(groups)
	slices.SortFunc(out, func(a, b Group) int { return cmp.Compare(a.Priority, b.Priority) })
	return out, nil
}

// TotalGracePeriod is the time a shutdown may take: the sum of the groups'
// periods. A logind trigger needs its InhibitDelayMaxSec to be at least
// this.
func TotalGracePeriod(groups []Group) time.Duration {
	var sum int64
	for _, g := range groups {
		sum += g.GracePeriodSeconds
	}
	return time.Duration(sum) * time.Second
}

// groupIndex returns the group of a pod of priority prio among groups
// sorted by priority: the last group whose priority is at most prio, or
// the first group when prio is below all of them.
func groupIndex(groups []Group, prio int32) int {
	i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority > prio }) - 1
	return max(i, 0)
}

// podPriority is the pod's spec.priority, 0 when unset. As upstream, the
// priority class name and the pod's source are not consulted: a static
// pod needs spec.priority set to count as critical here.
func podPriority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return DefaultPriority
}

// assign splits pods over groups (sorted by priority): one slice per group.
func assign(groups []Group, pods []*v1.Pod) [][]*v1.Pod {
	out := make([][]*v1.Pod, len(groups))
	if len(groups) == 0 {
		return out
	}
	for _, p := range pods {
		if p == nil {
			continue
		}
		i := groupIndex(groups, podPriority(p))
		out[i] = append(out[i], p)
	}
	return out
}

// podGracePeriod is the grace period a pod gets in a group of period
// seconds: its own terminationGracePeriodSeconds when shorter.
func podGracePeriod(pod *v1.Pod, period int64) int64 {
	if t := pod.Spec.TerminationGracePeriodSeconds; t != nil && *t < period {
		return max(*t, 0)
	}
	return period
}

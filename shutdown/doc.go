// Package shutdown owns graceful node shutdown, as upstream kubelet's
// node shutdown manager: when the machine is about to go down, the node
// turns NotReady ("node is shutting down"), new pods are rejected
// (NodeShutdown) and the running pods are stopped by priority, lowest
// first, within the grace periods of the KubeletConfiguration fields
// shutdownGracePeriod / shutdownGracePeriodCriticalPods or
// shutdownGracePeriodByPodPriority (Groups). Each stopped pod ends Failed
// with reason Terminated and a DisruptionTarget condition.
//
// Manager.Shutdown is the synchronous step; Manager.Run(ctx, trigger)
// waits for a Trigger and calls it. The manager does not stop containers
// itself (its PodKiller does; syncloop.Loop.KillPod fits) nor publish the
// node status (Ready is a readiness check for statusmgr.ReadyCondition).
//
// Triggers. SignalTrigger(syscall.SIGPWR) is what the reference agent
// uses: send SIGPWR to the agent to simulate a system shutdown;
// SIGTERM/SIGINT only stop the agent and leave pods running. A
// systemd-logind trigger (take a "delay" inhibitor lock for "shutdown"
// through org.freedesktop.login1.Manager.Inhibit, raise
// InhibitDelayMaxSec to TotalGracePeriod when needed, watch the
// PrepareForShutdown signal, close the lock once Shutdown returns and take
// a new one on PrepareForShutdown(false)) is not part of this package, as
// nodekit's go.mod carries no D-Bus client: implement Trigger (Watch) and
// Releaser (Release) over one and pass it to Run.
//
// Not kept, unlike upstream: the graceful_node_shutdown_state file and the
// shutdown start/end metrics.
//
// Usage:
//
//	groups, err := shutdown.Groups(shutdown.GracePeriodConfig{
//		ShutdownGracePeriod:              cfg.ShutdownGracePeriod.Duration,
//		ShutdownGracePeriodCriticalPods:  cfg.ShutdownGracePeriodCriticalPods.Duration,
//		ShutdownGracePeriodByPodPriority: cfg.ShutdownGracePeriodByPodPriority,
//	})
//	m, err := shutdown.New(shutdown.Config{Groups: groups,
//		ActivePods: loop.ActivePods, Killer: shutdown.PodKillerFunc(loop.KillPod)})
//	admitters = append(admitters, m)                 // near the end of the chain
//	statusmgr.ReadyCondition(runtimeCheck, plegCheck, m) // m.Ready
//	go m.Run(ctx, shutdown.SignalTrigger(syscall.SIGPWR))
package shutdown

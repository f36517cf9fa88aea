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
// uses where no systemd-logind runs: send SIGPWR to the agent to simulate
// a system shutdown; SIGTERM/SIGINT only stop the agent and leave pods
// running. Package shutdown/logind is the systemd-logind trigger (a
// "delay" inhibitor lock for "shutdown", InhibitDelayMaxSec raised to
// TotalGracePeriod through a drop-in, the PrepareForShutdown signal, the
// lock closed once Shutdown returns and taken again on
// PrepareForShutdown(false)).
//
// As upstream, Config.StateFile (ROOTDIR/graceful_node_shutdown_state)
// records when the last Shutdown began and ended, and Config.Times is
// given those times for the kubelet_graceful_shutdown_start_time_seconds
// and _end_time_seconds gauges (the stored ones when Run starts).
//
// Usage:
//
//	groups, err := shutdown.Groups(shutdown.GracePeriodConfig{
//		ShutdownGracePeriod:              cfg.ShutdownGracePeriod.Duration,
//		ShutdownGracePeriodCriticalPods:  cfg.ShutdownGracePeriodCriticalPods.Duration,
//		ShutdownGracePeriodByPodPriority: cfg.ShutdownGracePeriodByPodPriority,
//	})
//	store := syncloop.NewPodStore() // built first; the loop it is given to answers through it
//	m, err := shutdown.New(shutdown.Config{Groups: groups,
//		ActivePods: store.ActivePods, Killer: shutdown.PodKillerFunc(store.KillPod)})
//	admitters = append(admitters, m)                 // near the end of the chain
//	statusmgr.ReadyCondition(runtimeCheck, plegCheck, m) // m.Ready
//	go m.Run(ctx, shutdown.SignalTrigger(syscall.SIGPWR))
package shutdown

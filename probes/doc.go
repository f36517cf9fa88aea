// Package probes owns container probes and lifecycle hooks.
//
// Manager runs liveness, readiness and startup probes (exec, httpGet,
// tcpSocket, grpc) with upstream kubelet semantics: one worker per (pod,
// container, kind) for regular and sidecar containers; initial delay from
// container start; a result reported only after successThreshold or
// failureThreshold equal results in a row; readiness starting at Failure,
// liveness at Success, startup at Unknown; the startup probe gating the
// other two; everything starting over when the container restarts. Results
// are kept per container ID, read with Result, and a change is announced by
// the pod's UID on Updates. HookRunner runs postStart and preStop handlers
// (exec, httpGet, sleep).
//
// It does not restart or kill containers, compute pod conditions or
// record the Killing, FailedPostStartHook and FailedPreStopHook events: the
// sync loop does, from the results and errors given here. It needs only a
// StatusGetter (statusmgr) and an Execer (criruntime).
//
// Kind and Result are the root contract's nodekit.ProbeKind and
// ProbeResult, which the sync loop reads too, so the Manager is the loop's
// ProbeResults and ProbeWorkers as it is:
//
//	pm, _ := probes.NewManager(probes.Config{Status: statusMgr, Execer: rt, Recorder: rec, Clock: clk})
//	go pm.Run(ctx)
//	loop, _ := syncloop.New(syncloop.Config{Probes: pm, ProbeWorkers: pm, ProbeUpdates: pm.Updates(), ...})
//
// A loop whose worker may be busy (a pod terminating for a long grace
// period) also wants readiness and startup results in the pod's status at
// once, as upstream's prober writes them: a Relay reads Updates, records
// the results with the status manager's SetContainerReadiness and
// SetContainerStartup, and passes the UIDs on to the loop, with any other
// wake-ups of the loop's pod workers beside them:
//
//	relay := probes.NewRelay(pm, statusMgr, store, resizer.Retries())
//	go relay.Run(ctx)
//	loop, _ := syncloop.New(syncloop.Config{Probes: pm, ProbeWorkers: pm, ProbeUpdates: relay.Updates(), ...})
//
// The loop calls AddPod on every sync of a running pod, StopLivenessAndStartup
// when a pod starts terminating, RemovePod when it is gone and CleanupPods
// from housekeeping; for a liveness or startup kill it takes the grace period
// from TerminationGracePeriod.
package probes

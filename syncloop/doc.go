// Package syncloop owns the main loop of a node agent and the per-pod
// workers: it selects over pod updates, PLEG events, the sync and
// housekeeping ticks and probe results; serializes the work of each pod
// through the syncing -> terminating -> terminated -> finished phases;
// runs the admission chain; and decides each pod's actions (restart
// policy, crash-loop and image-pull back-off, init containers) that a
// nodekit.Runtime carries out. It builds each pod's API status from the
// runtime's view: container statuses, IPs and start time here, phase and
// conditions by internal/podstatus, the generator the status manager uses
// too. Container statuses carry their volumeMounts as upstream: from the
// spec while the runtime has no container (recursiveReadOnly Enabled where
// Config.RecursiveReadOnly says the pod's runtime handler makes the mount
// so, Disabled for other read-only mounts), then carried from the last
// status.
// A container exiting with a code whose first matching rule has action
// RestartAllContainers has the worker kill and remove every init and
// regular container of the pod (keeping the sandbox) and start them again
// from the first init container, as upstream (restartall.go; the semantics
// are written down in internal/restartrules). That needs the Runtime's
// optional ContainerRemover.
// With a Resizer (package allocation), a worker syncs each pod at its
// allocated resources, applies an allocated resize to the running
// containers before starting any, and restarts the containers whose
// resizePolicy asks for it in upstream's order (they are stopped before
// the pod cgroup and the other containers are resized, and started
// after, even when that resize failed, as upstream starts them; the failed
// resize is then tried once more while they run, so a success does not
// restart them again at the next sync); the resize conditions and
// container resources come from the Resizer. With ResourceHealth providers
// (devicemgr, dra), every status of a regular container carries the
// health of its devices (allocatedResourcesStatus); a pod's UID on
// ProbeUpdates publishes a health change at once. UpdateObservers are
// told of each spec update of a pod the loop holds, with the version it
// held, before the pod's worker sees it (upstream's checks of a pod
// update; admission.UpdateChecker is one).
//
// It does not talk to a container runtime protocol or to the API server
// directly: those come in through nodekit.Runtime and the StatusManager
// (package statusmgr). It keeps the pods it was told to run in a PodStore,
// which a main builds first and hands to the loop and to the store's
// readers, so nothing is bound late. The store also answers for the loop
// it is given to (ActivePods, NotTerminatedPods, SourcesReady,
// PodCleanedUp, KillPod, ShouldPodContentBeRemoved,
// ShouldPodRuntimeBeRemoved), so the parts built before the loop —
// admission policies, resource managers, eviction, garbage collection,
// node shutdown, in-place resize — are handed the store:
//
//	store := syncloop.NewPodStore()
//	cache := pleg.NewCache()
//	events := pleg.New(rt, cache, pleg.Options{})
//	status, _ := statusmgr.NewManager(statusmgr.Config{Sink: sink, Pods: store, Mirrors: store})
//	loop, _ := syncloop.New(syncloop.Config{
//		Runtime: rt, Pods: store, Cache: cache, Status: status,
//		Updates: merger.Updates(), Events: events.Events(), RootDir: root,
//	})
//	// run merger, events and status, then:
//	err := loop.Run(ctx)
//
// Drain is the synchronous step under Run: it handles what waits on the
// loop's inputs and, with Config.InlineWorkers, runs every pending pod
// worker step on the caller's goroutine, so a test drives the loop on a
// fake clock without goroutines or sleeps (agenttest's stepped SimNode
// does). HandleUpdate, SyncDue and Housekeeping are the finer steps.
// Housekeeping removes the directories (ROOT/pods/UID) of pods that are
// gone, unless something is still mounted below them: it lists mounts
// through Config.Mounts (fullagent hands the volume manager's Mounter),
// else reads the host's mount table.
//
// With Config.TracerProvider each pod worker step runs in upstream
// kubelet's span (syncPod, syncTerminatingPod, syncTerminatedPod, with
// the pod's UID, name and namespace), so the runtime calls of the step
// are traced under it; without one nothing is traced.
//
// Optional capabilities of the parts it is given are named interfaces
// found by type assertion: PodTerminator and OrphanStatusRemover of a
// StatusManager, VolumeCleaner of a VolumeManager, ContainerRemover of a
// Runtime.
package syncloop

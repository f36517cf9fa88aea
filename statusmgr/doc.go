// Package statusmgr owns what a node agent reports to the cluster: pod
// statuses, the Node object and the node's Lease heartbeat.
//
// Manager is the single owner of pod status. Workers hand it the statuses
// they compute (SetPodStatus), probes their results (SetContainerReadiness,
// SetContainerStartup); it keeps one versioned status per pod that never
// moves backwards — a terminal phase stays terminal, a container that has
// terminated for good stays terminated, start and transition times are kept
// — and publishes each new version to a nodekit.StatusSink (Run, or the
// SyncOnce and Resync steps), one pod at a time as upstream, or
// Config.Parallel pods at once (fullagent publishes to two). It keeps a deep copy of each pod it is given,
// or, with Config.SharePods, the pod itself: the sync loop never modifies a
// pod it stored, and at 1000 pods a copy each is megabytes. Static pods
// publish to their mirror pod. When a deleted pod has finished
// (TerminatePod) and its resources are released (PodResourcesReclaimed),
// the manager asks the sink to delete it, once.
//
// APISink is the sink of a node in a cluster (status patches with a UID
// precondition, computed against the newest version of the pod it knows —
// the informer's copy, or its own last write's response — with that
// version's resourceVersion as precondition, so a patch needs no GET unless
// someone else wrote the pod; final deletion with grace period 0) and
// MirrorClient creates
// and deletes mirror pods. NodeReporter registers the Node and keeps its
// status — capacity from a MachineInfo, addresses, nodeInfo, conditions from
// pluggable providers, status.declaredFeatures (DeclaredFeatures computes
// it from the gates as kubelet v1.37.2, further fields from StatusSetters
// such as fullagent's volumesInUse) — fresh, and tells NodeConfig.Reported
// of the Node after each sync (the volume manager's ReportedInUse gate
// learns from it); Heartbeat renews the node's Lease. All of
// them work with the node's own credentials.
//
// The decisions it makes about a status — Ready and ContainersReady after a
// probe result, never ready in a terminal phase, which conditions it owns and
// which keep their lastTransitionTime — come from internal/podstatus, the
// generator the workers use too, so the two never disagree.
//
// It does not compute a pod's status from the runtime (the workers do), nor
// decide when a pod is finished or its resources released (the sync loop
// and volume manager do), nor decide node pressure (eviction does; plug it in
// with PressureCondition).
//
//	client, _ := kubeclient.New(cfg, nil) // or clientgo.Wrap(clientset)
//	sink := statusmgr.NewAPISink(client)
//	store := syncloop.NewPodStore() // the pod store, built first, also given to the loop
//	pods, _ := statusmgr.NewManager(statusmgr.Config{Sink: sink, Mirrors: store, Pods: store})
//	node, _ := statusmgr.NewNodeReporter(client, statusmgr.NodeConfig{NodeName: name, NodeIP: ip,
//		Runtime: rt, Conditions: map[v1.NodeConditionType]statusmgr.ConditionProvider{
//			v1.NodeReady: statusmgr.ReadyCondition(rt)}})
//	lease, _ := statusmgr.NewHeartbeat(client, statusmgr.HeartbeatConfig{NodeName: name})
//	go pods.Run(ctx); go node.Run(ctx); go lease.Run(ctx)
//	...
//	pods.SetPodStatus(pod, status) // from the pod workers
package statusmgr

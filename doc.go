// Package nodekit holds the contracts every nodekit package meets at: the pod
// update stream (PodUpdate, Op, Source), the pod-level container runtime
// (Runtime and its value types), the status sink (StatusSink), admission
// (Admitter, Decision) and probe results (ProbeKind, ProbeResult: what the
// probe runner reports and the sync loop reads).
//
// It has no logic and no dependencies beyond the Kubernetes API types, so a
// vendor can implement any one contract — a non-CRI Runtime, an MQTT
// StatusSink, a policy Admitter — without importing the rest of nodekit.
//
// The data flows one way:
//
//	Source -> podconfig -> syncloop -> Runtime -> pleg -> syncloop -> statusmgr -> StatusSink
//	                          |
//	                       Admitter
package nodekit

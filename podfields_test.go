package nodekit_test

import (
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// Where each pod field takes effect on a nodekit node. Every field is one
// of: acted on (the package that does), refused (the admitter, or the
// volume manager's FailedMount, that reports it), or API-side (the API
// server, scheduler or a controller uses it; a node has nothing to do).
// Security-context fields are listed as a whole; their parts belong to the
// security work (seccomp, AppArmor, SELinux, procMount, hostUsers, ...).
const (
	apiSide = "API-side, no node effect: "
	actedOn = "acted on: "
	refused = "refused: "
	gap     = "known gap: "
)

var podSpecFields = map[string]string{
	"Volumes":                       actedOn + "volumemgr, criruntime (image volumes; sources without a plugin: FailedMount, ContainerCreating)",
	"InitContainers":                actedOn + "syncloop, criruntime",
	"Containers":                    actedOn + "syncloop, criruntime",
	"EphemeralContainers":           actedOn + "syncloop, criruntime",
	"RestartPolicy":                 actedOn + "syncloop, statusmgr, probes (internal/restartrules)",
	"TerminationGracePeriodSeconds": actedOn + "syncloop, criruntime, shutdown, eviction",
	"ActiveDeadlineSeconds":         actedOn + "syncloop",
	"DNSPolicy":                     actedOn + "podopts",
	"NodeSelector":                  actedOn + "admission (NodeAffinity)",
	"ServiceAccountName":            actedOn + "volumemgr (token projections), podopts",
	"DeprecatedServiceAccount":      apiSide + "the API server copies it to serviceAccountName; podconfig refuses it on static pods",
	"AutomountServiceAccountToken":  apiSide + "the ServiceAccount admission plugin injects (or not) the token volume",
	"NodeName":                      actedOn + "podconfig (this node's pods), admission (NodeName)",
	"HostNetwork":                   actedOn + "criruntime, podopts",
	"HostPID":                       actedOn + "criruntime",
	"HostIPC":                       actedOn + "criruntime, admission (Sysctls)",
	"ShareProcessNamespace":         actedOn + "criruntime",
	"SecurityContext":               actedOn + "criruntime, volumemgr (fsGroup), admission; fields: security work",
	"ImagePullSecrets":              actedOn + "syncloop, criruntime",
	"Hostname":                      actedOn + "podopts, criruntime",
	"Subdomain":                     actedOn + "podopts",
	"Affinity":                      actedOn + "admission (required node affinity); pod (anti-)affinity is the scheduler's",
	"SchedulerName":                 apiSide + "scheduler",
	"Tolerations":                   actedOn + "admission (TaintToleration), eviction",
	"HostAliases":                   actedOn + "podopts",
	"PriorityClassName":             actedOn + "cgroupmgr (critical pods' OOM score)",
	"Priority":                      actedOn + "eviction, shutdown, cgroupmgr",
	"DNSConfig":                     actedOn + "podopts",
	"ReadinessGates":                actedOn + "statusmgr, syncloop",
	"RuntimeClassName":              actedOn + "examples/fullagent (the RuntimeClass handler)",
	"EnableServiceLinks":            actedOn + "podopts",
	"PreemptionPolicy":              apiSide + "scheduler preemption",
	"Overhead":                      actedOn + "admission (ResourceFit), cgroupmgr (pod requests include it)",
	"TopologySpreadConstraints":     apiSide + "scheduler",
	"SetHostnameAsFQDN":             actedOn + "podopts",
	"OS":                            actedOn + "admission (OS)",
	"HostUsers":                     actedOn + "admission (Sysctls); user namespaces: security work",
	"SchedulingGates":               apiSide + "scheduler (a gated pod is never bound)",
	"ResourceClaims":                actedOn + "dra, syncloop (prepared before the sandbox; device health in the containers' allocatedResourcesStatus); refused by admission.PodFeatures (PodFeatureUnsupported: DynamicResourceAllocation) where the agent prepares none",
	"Resources":                     actedOn + "cgroupmgr, internal/qos, admission (ResourceFit), podopts (downward API)",
	"HostnameOverride":              actedOn + "podopts",
	"SchedulingGroup":               apiSide + "scheduler (workload groups)",
	"EvictionResponders":            apiSide + "the eviction-request controller",
}

var containerFields = map[string]string{
	"Name":                     actedOn + "syncloop, criruntime",
	"Image":                    actedOn + "criruntime",
	"Command":                  actedOn + "criruntime",
	"Args":                     actedOn + "criruntime",
	"WorkingDir":               actedOn + "criruntime",
	"Ports":                    actedOn + "admission (NodePorts), criruntime (host ports), probes (named ports)",
	"EnvFrom":                  actedOn + "podopts",
	"Env":                      actedOn + "podopts",
	"Resources":                actedOn + "criruntime, cgroupmgr, admission; resources.claims: dra (CDI devices, and their health in allocatedResourcesStatus), refused by admission.PodFeatures where the agent prepares no claims",
	"ResizePolicy":             actedOn + "allocation (in-place resize: NotRequired updates through criruntime, RestartContainer restarts), syncloop (Config.Resizer)",
	"RestartPolicy":            actedOn + "syncloop (sidecars), statusmgr, probes (internal/restartrules)",
	"RestartPolicyRules":       actedOn + "internal/restartrules (action Restart); RestartAllContainers refused (admission.PodFeatures)",
	"VolumeMounts":             actedOn + "volumemgr, podopts",
	"VolumeDevices":            actedOn + "volumemgr/csi (raw block volumes: CSI PVs of volumeMode Block), volumemgr (ContainerDevices), podopts (CRI devices); a volume that is not a Block PV fails to set up (FailedMount: volumeMode Filesystem, but is specified in volumeDevices)",
	"LivenessProbe":            actedOn + "probes, syncloop",
	"ReadinessProbe":           actedOn + "probes, syncloop",
	"StartupProbe":             actedOn + "probes, syncloop",
	"Lifecycle":                actedOn + "probes (hooks), syncloop; stopSignal is alpha and off in v1.37 (the API server drops it)",
	"TerminationMessagePath":   actedOn + "criruntime",
	"TerminationMessagePolicy": actedOn + "criruntime",
	"ImagePullPolicy":          actedOn + "criruntime",
	"SecurityContext":          actedOn + "criruntime; fields: security work",
	"Stdin":                    actedOn + "criruntime",
	"StdinOnce":                actedOn + "criruntime",
	"TTY":                      actedOn + "criruntime, server",
}

var ephemeralContainerFields = map[string]string{
	"EphemeralContainerCommon": actedOn + "as Container (the API server forbids resources, ports and probes)",
	"TargetContainerName":      actedOn + "criruntime (shares the target's process namespace)",
}

// TestEveryPodFieldIsAccountedFor walks v1.PodSpec, v1.Container and
// v1.EphemeralContainer by reflection: a field the tables above do not
// place (a new API field) fails the test until someone decides what a
// node does with it, and a table entry naming no field fails too.
func TestEveryPodFieldIsAccountedFor(t *testing.T) {
	for _, tc := range []struct {
		typ   reflect.Type
		table map[string]string
	}{
		{reflect.TypeFor[v1.PodSpec](), podSpecFields},
		{reflect.TypeFor[v1.Container](), containerFields},
		{reflect.TypeFor[v1.EphemeralContainer](), ephemeralContainerFields},
	} {
		var fields []string
		for i := range tc.typ.NumField() {
			name := tc.typ.Field(i).Name
			fields = append(fields, name)
			if _, ok := tc.table[name]; !ok {
				t.Errorf("%s.%s: not placed; decide whether nodekit acts on it, refuses it, or it is API-side", tc.typ.Name(), name)
			}
		}
		for name, where := range tc.table {
			if !slices.Contains(fields, name) {
				t.Errorf("%s has no field %s (table says %q)", tc.typ.Name(), name, where)
			}
		}
	}
}

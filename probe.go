package nodekit

// ProbeKind names a container probe. The probe runner (package probes)
// reports results under it and the sync loop (package syncloop) reads
// them under it, so one type serves both.
type ProbeKind string

// The probe kinds.
const (
	ProbeLiveness  ProbeKind = "liveness"
	ProbeReadiness ProbeKind = "readiness"
	ProbeStartup   ProbeKind = "startup"
)

// ProbeResult is the last reported result of a container's probe.
type ProbeResult int

// Probe results. Unknown is a probe's state before its first report (a
// startup probe's, or any probe's while its initial delay runs).
const (
	ProbeUnknown ProbeResult = iota
	ProbeSuccess
	ProbeFailure
)

func (r ProbeResult) String() string {
	switch r {
	case ProbeSuccess:
		return "Success"
	case ProbeFailure:
		return "Failure"
	}
	return "Unknown"
}

package cpumanager

import (
	"fmt"
	"strconv"
)

// CPU manager policies (KubeletConfiguration cpuManagerPolicy).
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// Static policy options (cpuManagerPolicyOptions) nodekit supports.
const (
	// OptionFullPCPUsOnly allocates whole physical cores only; a request
	// that is not a multiple of the threads per core is rejected with
	// SMTAlignmentError.
	OptionFullPCPUsOnly = "full-pcpus-only"
	// OptionDistributeCPUsAcrossNUMA spreads a request that needs more
	// than one NUMA node evenly over the nodes it uses.
	OptionDistributeCPUsAcrossNUMA = "distribute-cpus-across-numa"
	// OptionStrictCPUReservation keeps the reserved CPUs out of the shared
	// pool too, leaving them to system and kube daemons alone.
	OptionStrictCPUReservation = "strict-cpu-reservation"
)

// Upstream options nodekit does not implement: asking for them is an error
// rather than a silent difference.
var unsupportedOptions = map[string]bool{
	"align-by-socket":                  true,
	"distribute-cpus-across-cores":     true,
	"prefer-align-cpus-by-uncorecache": true,
}

type staticOptions struct {
	fullPCPUsOnly        bool
	distributeAcrossNUMA bool
	strictReservation    bool
}

func parseOptions(policy string, opts map[string]string) (staticOptions, error) {
	var o staticOptions
	if policy == PolicyNone {
		if len(opts) > 0 {
			return o, fmt.Errorf("cpumanager: None policy: received unsupported options=%v", opts)
		}
		return o, nil
	}
	for name, value := range opts {
		var dst *bool
		switch name {
		case OptionFullPCPUsOnly:
			dst = &o.fullPCPUsOnly
		case OptionDistributeCPUsAcrossNUMA:
			dst = &o.distributeAcrossNUMA
		case OptionStrictCPUReservation:
			dst = &o.strictReservation
		default:
			if unsupportedOptions[name] {
				return o, fmt.Errorf("cpumanager: CPU Manager Policy option %q is not supported by nodekit", name)
			}
			return o, fmt.Errorf("cpumanager: unknown CPU Manager Policy option: %q", name)
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return o, fmt.Errorf("cpumanager: bad value for option %q: %w", name, err)
		}
		*dst = b
	}
	return o, nil
}

package probes_test

import (
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/syncloop"
)

// The Manager is the sync loop's ProbeResults and ProbeWorkers with no
// adapter: both read results as nodekit.ProbeKind and ProbeResult.
var (
	_ syncloop.ProbeResults = (*probes.Manager)(nil)
	_ syncloop.ProbeWorkers = (*probes.Manager)(nil)
)

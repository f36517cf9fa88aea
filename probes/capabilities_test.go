package probes_test

import (
	"github.com/nodekit/nodekit/probes"
	"github.com/nodekit/nodekit/syncloop"
)

// The probe manager and the hook runner are what the sync loop runs
// probes and lifecycle hooks with; checked here, not in probes itself, so
// the package does not import syncloop.
var (
	_ syncloop.ProbeWorkers = (*probes.Manager)(nil)
	_ syncloop.HookRunner   = (*probes.HookRunner)(nil)
)

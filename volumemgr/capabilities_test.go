package volumemgr_test

import (
	"github.com/nodekit/nodekit/syncloop"
	"github.com/nodekit/nodekit/volumemgr"
)

// The Manager is the sync loop's VolumeManager with its optional
// VolumeCleaner; checked here, not in volumemgr itself, so the package
// does not import syncloop. A renamed method fails this build instead of
// silently turning off the teardown of orphaned pods' volumes.
var (
	_ syncloop.VolumeManager = (*volumemgr.Manager)(nil)
	_ syncloop.VolumeCleaner = (*volumemgr.Manager)(nil)
)

package statusmgr_test

import (
	"github.com/nodekit/nodekit/statusmgr"
	"github.com/nodekit/nodekit/syncloop"
)

// The Manager is the sync loop's StatusManager with its optional
// capabilities; checked here, not in statusmgr itself, so the package does
// not import syncloop. A renamed method fails this build instead of
// silently turning off orphan-status cleanup.
var (
	_ syncloop.StatusManager       = (*statusmgr.Manager)(nil)
	_ syncloop.PodTerminator       = (*statusmgr.Manager)(nil)
	_ syncloop.OrphanStatusRemover = (*statusmgr.Manager)(nil)
	_ syncloop.PhaseGetter         = (*statusmgr.Manager)(nil)
	_ syncloop.MirrorClient        = (*statusmgr.MirrorClient)(nil)
)

package pullrecords

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// Prune removes the pulled records of the images that are no longer on
// the node: every record whose image ID is not in present and that was
// last updated before until. Image GC calls it after a pass with the IDs
// of the images left and the time the pass began (so a record written
// by a pull that finished during the pass stays), and the agent at start
// with the runtime's images, so that records do not outlive their
// images. Intents are left alone. Records that do not decode are logged
// and stay.
func (v *Verifier) Prune(ctx context.Context, present []string, until time.Time) {
	logger := klog.FromContext(ctx)
	keep := make(map[string]bool, len(present))
	for _, id := range present {
		keep[id] = true
	}
	// The files keep whole seconds: a record written during the second
	// until falls in reads as older than until, and must stay.
	until = until.Truncate(time.Second)
	v.mu.Lock()
	defer v.mu.Unlock()
	recs, err := v.files.records()
	if err != nil {
		logger.Error(err, "Errors listing image pulled records, pruning the ones that could be read")
	}
	for _, rec := range recs {
		if keep[rec.ImageRef] || !rec.LastUpdatedTime.Time.Before(until) {
			continue
		}
		if err := v.store.deleteRecord(ctx, rec.ImageRef); err != nil {
			logger.Error(err, "Failed to remove an image pulled record", "imageRef", rec.ImageRef)
			continue
		}
		logger.V(4).Info("Removed the pulled record of an image no longer on the node", "imageRef", rec.ImageRef)
	}
}

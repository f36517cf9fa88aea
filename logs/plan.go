package logs

import (
	"slices"
	"strings"
	"time"
)

const (
	// TimestampFormat is the suffix format of a rotated log, as upstream:
	// 0.log becomes 0.log.20060102-150405.
	TimestampFormat = "20060102-150405"
	// CompressSuffix ends a compressed rotated log.
	CompressSuffix = ".gz"
	// tmpSuffix ends a compression in progress; such files left over
	// from a crash are removed.
	tmpSuffix = ".tmp"
)

// Policy is when a container log is rotated and how many files it keeps.
type Policy struct {
	// MaxSize in bytes: a log this large or larger is rotated.
	MaxSize int64
	// MaxFiles is the most files a container's log may have, the current
	// file included; the oldest rotated files beyond it are removed. At
	// least 2.
	MaxFiles int
}

// Plan is what one rotation of a log does, in this order: remove files,
// compress files, rename the log to RotateTo, ask the runtime to reopen it.
// The zero Plan does nothing.
type Plan struct {
	// Remove lists leftovers of interrupted rotations and the oldest
	// rotated files beyond the policy's MaxFiles.
	Remove []string
	// Compress lists rotated files not compressed yet. The file rotated by
	// this plan is not among them: a log reader may still be finishing
	// it, so it is compressed at the next rotation, as upstream.
	Compress []string
	// RotateTo is the log's new name, LOG.TIMESTAMP; "" means the log
	// stays as it is.
	RotateTo string
	// Postponed says the log is due but was already rotated within this
	// second: its rotated name is taken, so it waits for the next round.
	Postponed bool
}

// Decide plans the rotation of the log file log of the given size, where
// siblings are the other files whose names begin with log+"." (full paths,
// like log) and now names the rotated file. It rotates when size reaches
// p.MaxSize; it keeps p.MaxFiles-2 older rotated files so that, with the
// file rotated now and the new current file, p.MaxFiles remain.
func Decide(log string, size int64, siblings []string, now time.Time, p Policy) Plan {
	if size < p.MaxSize {
		return Plan{}
	}
	to := log + "." + now.Format(TimestampFormat)
	if slices.Contains(siblings, to) || slices.Contains(siblings, to+CompressSuffix) {
		return Plan{Postponed: true}
	}
	var plan Plan
	var kept []string
	for _, f := range siblings {
		if inUse(f, siblings) {
			kept = append(kept, f)
		} else {
			plan.Remove = append(plan.Remove, f)
		}
	}
	// The timestamp makes name order age order.
	slices.Sort(kept)
	if excess := len(kept) - max(p.MaxFiles-2, 0); excess > 0 {
		plan.Remove = append(plan.Remove, kept[:excess]...)
		kept = kept[excess:]
	}
	for _, f := range kept {
		if !strings.HasSuffix(f, CompressSuffix) {
			plan.Compress = append(plan.Compress, f)
		}
	}
	plan.RotateTo = to
	return plan
}

// inUse reports whether f still holds log content: not a temporary file,
// and not an uncompressed file whose compressed copy is complete (the
// original is removed right after, unless the agent stopped in between).
func inUse(f string, siblings []string) bool {
	switch {
	case strings.HasSuffix(f, tmpSuffix):
		return false
	case strings.HasSuffix(f, CompressSuffix):
		return true
	}
	return !slices.Contains(siblings, f+CompressSuffix)
}

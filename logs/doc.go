// Package logs owns container log rotation on the node, as upstream's
// container log manager: when a running container's log file reaches
// MaxSize it is renamed to LOG.TIMESTAMP (20060102-150405), older rotated
// files are gzip-compressed (never the one just rotated, which a reader
// may still be finishing), the oldest are removed so that at most MaxFiles
// files remain (the current one included), and the runtime is asked to
// reopen the log. If the runtime cannot reopen it, the log gets its name
// back and the next round tries again.
//
// Decide is the pure decision; Manager carries it out through a small
// Runtime interface (list running containers' log paths, reopen a log)
// that *criruntime.Runtime satisfies, with a Step, a Run loop and Rotate
// for one container on demand.
//
// It does not read logs (the node API does), nor remove the logs of
// removed containers or gone pods (garbage collection does).
//
// Usage:
//
//	m, err := logs.New(logs.Config{MaxSize: 10 << 20, MaxFiles: 5, Interval: 10 * time.Second}, runtime)
//	go m.Run(ctx)
//	err = m.Rotate(ctx, containerID) // now, whatever the size
package logs

// Package fsutil holds the node agent's durable file writes: WriteFileAtomic
// and WriteAtomic replace a file so that a crash or power loss leaves either
// the old content or the new, never a mix, and the new name survives once
// the call returns. Every package that keeps state or generated files on the
// node (checkpoints, kubeconfigs, certificates, hosts files) writes through
// it instead of carrying its own copy. WriteFileSwap is the same promise
// for a file one writer rewrites many times (a checkpoint written per pod):
// it exchanges the file with a fixed companion instead of renaming a new
// temporary file over it, so a write creates and frees no inode.
//
// Mounts parses the process's mount table (/proc/self/mountinfo: mount
// point, file system type, source, options, octal escapes decoded) once
// for every package that looks a mount up; ParseMountInfo parses such a
// table read from elsewhere (volumemgr's HostMounter takes its file). UnmountBelow detaches every
// mount at or below a directory, deepest first: what a stopped agent
// leaves mounted under its root (its bind mount, its pods' volumes)
// before a test, `make down` or the conformance harness removes that
// directory; UnmountUnder leaves a mount at the directory itself.
//
// It does not own any file format, locking between writers, or the
// projected-volume writer of volumemgr, which swaps whole directories.
//
//	if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
//		return fmt.Errorf("write checkpoint: %w", err)
//	}
package fsutil

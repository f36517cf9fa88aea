// Package ckpt holds what the checkpoint packages (cpumanager,
// memorymanager, devicemgr) share when they restore a checkpoint in
// upstream kubelet's format: Read, which tells a missing file from an
// unreadable one, and Checksum, upstream's checksum of checkpoint data
// (FNV-32a over the k8s.io/utils/dump hash printing of the value).
//
// It owns no file layout: each package decodes and verifies its own, keeps
// its own corrupt-checkpoint error, and writes with fsutil.WriteFileAtomic.
//
//	data, found, err := ckpt.Read(path)
//	if err != nil || !found {
//		return err
//	}
//	if ckpt.Checksum(f.Data) != f.Checksum {
//		return ErrCorruptCheckpoint
//	}
package ckpt

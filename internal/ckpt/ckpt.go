package ckpt

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"

	"k8s.io/utils/dump"
)

// Read returns the content of the checkpoint at path. A missing file is
// found=false with no error (a node that never had the checkpoint); any
// other failure is an error naming path.
func Read(path string) (data []byte, found bool, err error) {
	data, err = os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	return data, true, nil
}

// Checksum is upstream kubelet's checkpoint checksum of v: FNV-32a over
// dump.ForHash(v), the Go-syntax printing that includes type names. Two
// values printed alike have the same checksum, so a mirror type must
// carry upstream's package-qualified type names (see ChecksumPrinted).
func Checksum(v any) uint64 {
	return ChecksumPrinted(dump.ForHash(v))
}

// ChecksumPrinted is Checksum for a printing the caller has already made
// (and, for legacy layouts, rewritten so its type names read as upstream's).
func ChecksumPrinted(printed string) uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(printed)) // a hash.Hash never fails to write
	return uint64(h.Sum32())
}

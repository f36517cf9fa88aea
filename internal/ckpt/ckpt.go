package ckpt

import (
	"errors"
	"fmt"
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
//
// A string, the data field of most checkpoints, prints as "(string)"
// followed by its bytes unchanged; its checksum is computed so, without
// the printing (which copies the whole checkpoint once more per write).
func Checksum(v any) uint64 {
	if s, ok := v.(string); ok {
		return uint64(fnv32aString(fnv32aString(fnvOffset32, stringPrefix), s))
	}
	return ChecksumPrinted(dump.ForHash(v))
}

// FNV-1a, 32 bits (hash/fnv's New32a), over a string without copying it
// into a byte slice.
const (
	fnvOffset32 uint32 = 2166136261
	fnvPrime32  uint32 = 16777619
)

func fnv32aString(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnvPrime32
	}
	return h
}

// stringPrefix is how dump.ForHash prints a string's type before it.
const stringPrefix = "(string)"

// ChecksumPrinted is Checksum for a printing the caller has already made
// (and, for legacy layouts, rewritten so its type names read as upstream's).
func ChecksumPrinted(printed string) uint64 {
	return uint64(fnv32aString(fnvOffset32, printed))
}

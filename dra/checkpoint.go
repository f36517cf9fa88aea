package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// CheckpointFile is the name of the claim checkpoint under the root
// directory, as upstream kubelet names it.
const CheckpointFile = "dra_manager_state"

// The checkpoint's envelope is upstream's: {"Data": JSON, "Checksum":
// crc32(Data)}, Data holding kind DRACheckpoint of
// checkpoint.dra.kubelet.k8s.io/v1 with the claim list. So an upstream
// kubelet taking over the node reads it, and nodekit reads upstream's.
const (
	checkpointKind       = "DRACheckpoint"
	checkpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// claimState is one checkpointed claim. The field names are upstream's
// (they are serialised by Go name); Prepared is nodekit's own: upstream
// prepares every restored claim again, nodekit skips those whose
// NodePrepareResources had returned before the restart. Readers that do
// not know the field ignore it.
type claimState struct {
	ClaimUID    types.UID
	ClaimName   string
	Namespace   string
	PodUIDs     map[string]struct{}
	DriverState map[string]driverState
	Prepared    bool `json:"nodekitPrepared,omitempty"`
}

type driverState struct {
	Devices            []deviceState
	SkipNodeOperations []resourceapi.SkipNodeOperation `json:"skipNodeOperations,omitempty"`
}

type deviceState struct {
	PoolName     string
	DeviceName   string
	ShareID      *types.UID
	RequestNames []string
	CDIDeviceIDs []string
}

type checkpointData struct {
	metav1.TypeMeta
	ClaimInfoStateList []claimState
}

type checkpointEnvelope struct {
	Data     string
	Checksum uint32
}

// readCheckpoint returns the claims checkpointed at path; a missing file
// is an empty list.
func readCheckpoint(path string) ([]claimState, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read DRA checkpoint: %w", err)
	}
	var env checkpointEnvelope
	if err := json.Unmarshal(blob, &env); err != nil {
		return nil, fmt.Errorf("DRA checkpoint %s: %w", path, err)
	}
	if sum := crc32.ChecksumIEEE([]byte(env.Data)); sum != env.Checksum {
		return nil, fmt.Errorf("DRA checkpoint %s is corrupt: checksum %d, want %d (drain the node and remove the file)", path, env.Checksum, sum)
	}
	var data checkpointData
	if err := json.Unmarshal([]byte(env.Data), &data); err != nil {
		return nil, fmt.Errorf("DRA checkpoint %s: Data: %w", path, err)
	}
	if data.Kind != checkpointKind || data.APIVersion != checkpointAPIVersion {
		return nil, fmt.Errorf("DRA checkpoint %s: kind %q apiVersion %q, want %s %s", path, data.Kind, data.APIVersion, checkpointKind, checkpointAPIVersion)
	}
	return data.ClaimInfoStateList, nil
}

// writeCheckpoint replaces the checkpoint at path with claims, atomically
// (a crash leaves the old or the new one; fsutil.WriteFileSwap, so the
// companion .<name>.swap beside it holds the previous one).
func writeCheckpoint(path string, claims []claimState) error {
	if claims == nil {
		claims = []claimState{}
	}
	data, err := json.Marshal(checkpointData{
		TypeMeta:           metav1.TypeMeta{Kind: checkpointKind, APIVersion: checkpointAPIVersion},
		ClaimInfoStateList: claims,
	})
	if err != nil {
		return fmt.Errorf("encode DRA checkpoint: %w", err)
	}
	blob, err := json.Marshal(checkpointEnvelope{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
	if err != nil {
		return fmt.Errorf("encode DRA checkpoint: %w", err)
	}
	if err := fsutil.WriteFileSwap(path, blob, 0o600); err != nil {
		return fmt.Errorf("write DRA checkpoint: %w", err)
	}
	return nil
}

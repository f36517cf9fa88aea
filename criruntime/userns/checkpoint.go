package userns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// fileContent is the checkpoint, in upstream kubelet's format, so either
// agent can read the other's.
type fileContent struct {
	UIDMappings []idMapping `json:"uidMappings"`
	GIDMappings []idMapping `json:"gidMappings"`
}

type idMapping struct {
	HostID      uint32 `json:"hostId"`
	ContainerID uint32 `json:"containerId"`
	Length      uint32 `json:"length"`
}

// read returns the pod's checkpointed range; false when it has none.
func (a *Allocator) read(uid types.UID) (Mapping, bool, error) {
	p := a.file(uid)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Mapping{}, false, nil
	}
	if err != nil {
		return Mapping{}, false, fmt.Errorf("userns: %w", err)
	}
	if len(data) == 0 {
		return Mapping{}, false, nil
	}
	m, err := parse(data)
	if err != nil {
		return Mapping{}, false, fmt.Errorf("userns: %s: %w", p, err)
	}
	return m, true, nil
}

// parse accepts only what New and Get write: one mapping, the same for
// UIDs and GIDs, with container ID 0 mapped.
func parse(data []byte) (Mapping, error) {
	var c fileContent
	if err := json.Unmarshal(data, &c); err != nil {
		return Mapping{}, fmt.Errorf("invalid user namespace mappings file: %w", err)
	}
	if len(c.UIDMappings) != 1 || len(c.GIDMappings) != 1 {
		return Mapping{}, errors.New("invalid user namespace configuration: want exactly one UID and one GID mapping")
	}
	u, g := c.UIDMappings[0], c.GIDMappings[0]
	if u != g {
		return Mapping{}, errors.New("invalid user namespace configuration: GID and UID mapping should be identical")
	}
	if u.ContainerID != 0 {
		return Mapping{}, errors.New("invalid user namespace configuration: UID 0 must be mapped")
	}
	return Mapping{HostID: u.HostID, Length: u.Length}, nil
}

// write checkpoints m for the pod durably (fsutil.WriteFileAtomic).
func (a *Allocator) write(uid types.UID, m Mapping) error {
	dir := filepath.Dir(a.file(uid))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("userns: create pod directory: %w", err)
	}
	one := []idMapping{{HostID: m.HostID, ContainerID: 0, Length: m.Length}}
	data, err := json.Marshal(fileContent{UIDMappings: one, GIDMappings: one})
	if err != nil {
		return fmt.Errorf("userns: %w", err)
	}
	if err := fsutil.WriteFileAtomic(a.file(uid), data, 0o600); err != nil {
		return fmt.Errorf("userns: write checkpoint of pod %s: %w", uid, err)
	}
	return nil
}

package podconfig

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// CheckpointVersion is the version of the pod checkpoint format this
// package writes and reads. A file of another version is refused with
// ErrCheckpointVersion, never guessed at.
const CheckpointVersion = 1

// checksumPrefix names the checksum algorithm in the file.
const checksumPrefix = "sha256:"

// maxCheckpointSize bounds what ReadCheckpoint reads: a node's pods with
// their ConfigMaps and Secrets (each at most 1 MiB in the API) fit with
// room to spare.
const maxCheckpointSize = 256 << 20

// Errors of DecodeCheckpoint and ReadCheckpoint; test with errors.Is.
var (
	// ErrCheckpointCorrupt: the file is not a checkpoint, its checksum does
	// not match its payload, or the payload does not decode.
	ErrCheckpointCorrupt = errors.New("pod checkpoint is corrupt")
	// ErrCheckpointVersion: the file is a checkpoint of another format
	// version.
	ErrCheckpointVersion = errors.New("pod checkpoint has an unsupported format version")
)

// PodCheckpoint is what a pod checkpoint holds: the last-known pods bound
// to a node and the objects they need to start without the API server.
// Objects are as the API server served them (managedFields dropped).
type PodCheckpoint struct {
	// NodeName is the node the pods are bound to. A checkpoint of another
	// node is never served.
	NodeName string `json:"nodeName"`
	// Written is when the checkpoint was written.
	Written metav1.Time `json:"written"`
	// Pods are the node's pods as the API server last listed them, sorted
	// by namespace/name.
	Pods []*v1.Pod `json:"pods"`
	// ConfigMaps and Secrets are those the pods reference (environment,
	// volumes, projected volumes, image pull secrets), sorted by
	// namespace/name.
	ConfigMaps []*v1.ConfigMap `json:"configMaps,omitempty"`
	Secrets    []*v1.Secret    `json:"secrets,omitempty"`
	// Services are the Services of the pods' namespaces and of "default",
	// for the service-link environment variables, sorted by
	// namespace/name. ServiceNamespaces lists the namespaces whose
	// Services were listed (a namespace without Services has none here).
	Services          []*v1.Service `json:"services,omitempty"`
	ServiceNamespaces []string      `json:"serviceNamespaces,omitempty"`
	// Node is the Node object as last seen, for admission while the API
	// server cannot be reached; nil if it was never seen.
	Node *v1.Node `json:"node,omitempty"`
	// Tokens are the service account tokens the pods' projected volumes
	// were last given, sorted by namespace, service account and request.
	Tokens []*CheckpointToken `json:"tokens,omitempty"`
}

// CheckpointToken is a service account token as the TokenRequest API
// returned it: Token.Spec is the request as it was made, Token.Status the
// token and its expiry.
type CheckpointToken struct {
	Namespace      string                         `json:"namespace"`
	ServiceAccount string                         `json:"serviceAccount"`
	Token          *authenticationv1.TokenRequest `json:"token"`
}

// checkpointFile is the file's envelope. Checksum is the sha256 of Payload
// exactly as it is in the file.
type checkpointFile struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Payload  json.RawMessage `json:"payload"`
}

// EncodeCheckpoint returns the file content of c: a JSON envelope with the
// format version, the payload and the sha256 checksum of the payload. It
// does not modify c.
func EncodeCheckpoint(c *PodCheckpoint) ([]byte, error) {
	if c == nil {
		return nil, errors.New("podconfig: encode checkpoint: nil checkpoint")
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("podconfig: encode checkpoint: %w", err)
	}
	out, err := json.Marshal(checkpointFile{Version: CheckpointVersion, Checksum: checksumOf(payload), Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("podconfig: encode checkpoint: %w", err)
	}
	return append(out, '\n'), nil
}

// DecodeCheckpoint parses file content written by EncodeCheckpoint. It
// checks the version first (ErrCheckpointVersion), then the checksum, then
// that every pod has a name, namespace and UID and every object a name
// (ErrCheckpointCorrupt otherwise). The result belongs to the caller.
func DecodeCheckpoint(data []byte) (*PodCheckpoint, error) {
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: not a checkpoint file: %w", ErrCheckpointCorrupt, err)
	}
	if f.Version != CheckpointVersion {
		return nil, fmt.Errorf("%w: version %d, this agent reads version %d", ErrCheckpointVersion, f.Version, CheckpointVersion)
	}
	if !strings.HasPrefix(f.Checksum, checksumPrefix) {
		return nil, fmt.Errorf("%w: checksum %q is not %s<hex>", ErrCheckpointCorrupt, f.Checksum, checksumPrefix)
	}
	if got := checksumOf(f.Payload); got != f.Checksum {
		return nil, fmt.Errorf("%w: checksum mismatch: the file says %s, the payload's is %s", ErrCheckpointCorrupt, f.Checksum, got)
	}
	c := &PodCheckpoint{}
	dec := json.NewDecoder(bytes.NewReader(f.Payload))
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%w: payload: %w", ErrCheckpointCorrupt, err)
	}
	if err := validateCheckpoint(c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpointCorrupt, err)
	}
	return c, nil
}

// checksumOf is the checksum of a payload as the file carries it.
func checksumOf(payload []byte) string {
	sum := sha256.Sum256(payload)
	return checksumPrefix + hex.EncodeToString(sum[:])
}

func validateCheckpoint(c *PodCheckpoint) error {
	for i, p := range c.Pods {
		if p == nil || p.Name == "" || p.Namespace == "" || p.UID == "" {
			return fmt.Errorf("pods[%d]: a pod needs a name, a namespace and a UID", i)
		}
	}
	for i, o := range c.ConfigMaps {
		if o == nil || o.Name == "" {
			return fmt.Errorf("configMaps[%d]: no name", i)
		}
	}
	for i, o := range c.Secrets {
		if o == nil || o.Name == "" {
			return fmt.Errorf("secrets[%d]: no name", i)
		}
	}
	for i, o := range c.Services {
		if o == nil || o.Name == "" {
			return fmt.Errorf("services[%d]: no name", i)
		}
	}
	for i, o := range c.Tokens {
		if o == nil || o.Namespace == "" || o.ServiceAccount == "" || o.Token == nil {
			return fmt.Errorf("tokens[%d]: a token needs a namespace, a service account and the TokenRequest", i)
		}
	}
	return nil
}

// WriteCheckpoint writes c to path atomically: to a temporary file in the
// same directory (mode 0600: the checkpoint holds Secrets), fsynced, then
// renamed over path, and the directory fsynced, so that a crash leaves
// either the old file or the new one. The directory must exist.
func WriteCheckpoint(path string, c *PodCheckpoint) error {
	data, err := EncodeCheckpoint(c)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("podconfig: write checkpoint: %w", err)
	}
	return nil
}

// ReadCheckpoint reads and decodes the checkpoint at path. A missing file
// is an error for which errors.Is(err, fs.ErrNotExist) holds; a damaged one
// fails with ErrCheckpointCorrupt or ErrCheckpointVersion.
func ReadCheckpoint(path string) (*PodCheckpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("podconfig: read checkpoint: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxCheckpointSize+1)); err != nil {
		return nil, fmt.Errorf("podconfig: read checkpoint %s: %w", path, err)
	}
	if buf.Len() > maxCheckpointSize {
		return nil, fmt.Errorf("podconfig: read checkpoint %s: %w: larger than %d bytes", path, ErrCheckpointCorrupt, maxCheckpointSize)
	}
	c, err := DecodeCheckpoint(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("podconfig: read checkpoint %s: %w", path, err)
	}
	return c, nil
}

package csitest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// Config describes a driver.
type Config struct {
	// Name is the driver's name, e.g. "csi.nodekit.test".
	Name string
	// NodeID is what NodeGetInfo reports.
	NodeID string
	// MaxVolumes is NodeGetInfo's max_volumes_per_node (0: no limit).
	MaxVolumes int64
	// Topology is NodeGetInfo's accessible topology segments.
	Topology map[string]string
	// StateDir holds the volumes, calls.log and fail.
	StateDir string
	// NoVolumeStats leaves GET_VOLUME_STATS out of the node capabilities,
	// as a driver that reports no volume stats.
	NoVolumeStats bool
	// VolumeMountGroup advertises VOLUME_MOUNT_GROUP: a publish with a
	// volume_mount_group chgrps the target to it.
	VolumeMountGroup bool
	// ExpandVolume advertises EXPAND_VOLUME: NodeExpandVolume is logged
	// to ExpandLogFile and grows a block volume's file and loop device.
	ExpandVolume bool
	// BlockSize is the size of a new block volume's file; 0 means
	// DefaultBlockSize.
	BlockSize int64
	// SingleNodeMultiWriter advertises SINGLE_NODE_MULTI_WRITER: the
	// driver takes the access modes SINGLE_NODE_SINGLE_WRITER and
	// SINGLE_NODE_MULTI_WRITER (AccessModeLogFile shows which it got).
	SingleNodeMultiWriter bool
	// Clock stamps TimedCallLogFile's lines; nil means the real clock.
	Clock clock.PassiveClock
	// StageTmpfs stages a file system volume on a tmpfs of its own,
	// mounted with the capability's mount flags as its options (an
	// SELinux context="LABEL" is then a real context mount), instead of
	// bind-mounting the volume's directory; its content goes with the
	// unstage.
	StageTmpfs bool
}

// DefaultBlockSize is the size of a block volume's file unless
// Config.BlockSize says otherwise.
const DefaultBlockSize = 16 << 20

// Server implements the CSI Identity and Node services over Config.
type Server struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer
	cfg Config
	mu  sync.Mutex // serializes calls, as the call log wants
}

// NewServer returns a Server; it creates cfg.StateDir.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Name == "" || cfg.NodeID == "" || cfg.StateDir == "" {
		return nil, errors.New("csitest: Name, NodeID and StateDir are required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "volumes"), 0o750); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Server{cfg: cfg}, nil
}

// CallLogFile, FailFile and SecretsLogFile are the file names under the
// state dir.
const (
	CallLogFile = "calls.log"
	FailFile    = "fail"
	// TimedCallLogFile has the lines of CallLogFile, each after the time
	// the call came in (RFC 3339 with nanoseconds and a space), for
	// tests that measure the spacing of an agent's retries.
	TimedCallLogFile = "calls_timed.log"
	// SecretsLogFile has a line "RPC VOLUME KEY=VALUE,..." (keys sorted)
	// for each call that carried secrets.
	SecretsLogFile = "secrets.log"
	// ContextLogFile has the same line of each publish's volume context,
	// with volume_mount_group=G when the capability carried one.
	ContextLogFile = "context.log"
	// MountFlagsLogFile has a line "RPC VOLUME FLAG FLAG..." (in the
	// order given) for each NodeStageVolume and NodePublishVolume whose
	// mount capability carried mount flags, e.g. upstream's
	// context="LABEL" of an SELinux mount.
	MountFlagsLogFile = "mount_flags.log"
	// AccessModeLogFile has a line "RPC VOLUME MODE" (the CSI access
	// mode's name, e.g. SINGLE_NODE_WRITER) for each NodeStageVolume and
	// NodePublishVolume.
	AccessModeLogFile = "access_mode.log"
	// ExpandLogFile has a line "VOLUME PATH REQUIRED_BYTES" for each
	// NodeExpandVolume call.
	ExpandLogFile = "expand.log"
)

// logSecrets appends the secrets of a call to SecretsLogFile.
func (s *Server) logSecrets(rpc, volume string, secrets map[string]string) error {
	return s.logMap(SecretsLogFile, rpc, volume, secrets)
}

// logMap appends "RPC VOLUME K=V,..." (keys sorted) to the state file
// name, for a non-empty m.
func (s *Server) logMap(name, rpc, volume string, m map[string]string) error {
	if len(m) == 0 {
		return nil
	}
	secrets := m
	kv := make([]string, 0, len(secrets))
	for k, v := range secrets {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	f, err := os.OpenFile(filepath.Join(s.cfg.StateDir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	_, werr := fmt.Fprintf(f, "%s %s %s\n", rpc, volume, strings.Join(kv, ","))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return status.Error(codes.Internal, werr.Error())
	}
	return nil
}

// logAccessMode appends the access mode of a call to AccessModeLogFile.
func (s *Server) logAccessMode(rpc, volume string, c *csipb.VolumeCapability) error {
	return s.appendLine(AccessModeLogFile, rpc+" "+volume+" "+c.GetAccessMode().GetMode().String())
}

// logMountFlags appends the mount flags of a call to MountFlagsLogFile.
func (s *Server) logMountFlags(rpc, volume string, c *csipb.VolumeCapability) error {
	flags := c.GetMount().GetMountFlags()
	if len(flags) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(s.cfg.StateDir, MountFlagsLogFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	_, werr := fmt.Fprintf(f, "%s %s %s\n", rpc, volume, strings.Join(flags, " "))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return status.Error(codes.Internal, werr.Error())
	}
	return nil
}

// enter logs the call and returns the injected failure, if any.
func (s *Server) enter(rpc, volume, path string) error {
	at := s.cfg.Clock.Now().UTC().Format(time.RFC3339Nano)
	line := fmt.Sprintf("%s %s %s", rpc, volume, path)
	if err := s.appendLine(CallLogFile, line); err != nil { // block.go
		return err
	}
	if err := s.appendLine(TimedCallLogFile, at+" "+line); err != nil {
		return err
	}
	return s.injected(rpc, volume)
}

// injected returns the failure a line "RPC CODE [VOLUME [N]]" of
// FailFile injects into this call: one naming the rpc, and the volume if
// it names one; with N, only while the volume has had no more than N
// calls of rpc (CallLogFile, which has this one already).
func (s *Server) injected(rpc, volume string) error {
	f, err := os.Open(filepath.Join(s.cfg.StateDir, FailFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != rpc || (len(fields) > 2 && fields[2] != volume) {
			continue
		}
		if len(fields) > 3 {
			spent, err := s.budgetSpent(rpc, volume, fields[3])
			if err != nil {
				return err
			}
			if spent {
				continue
			}
		}
		code := codes.Internal
		if err := code.UnmarshalJSON([]byte(`"` + strings.ToUpper(camelToSnake(fields[1])) + `"`)); err != nil {
			code = codes.Internal
		}
		return status.Errorf(code, "injected failure of %s", rpc)
	}
	return nil
}

// budgetSpent says whether volume has had more calls of rpc than the
// count a fail line gives.
func (s *Server) budgetSpent(rpc, volume, count string) (bool, error) {
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return false, status.Errorf(codes.Internal, "%s: bad failure count %q", FailFile, count)
	}
	b, err := os.ReadFile(filepath.Join(s.cfg.StateDir, CallLogFile))
	if err != nil {
		return false, status.Error(codes.Internal, err.Error())
	}
	calls := 0
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, rpc+" "+volume+" ") {
			calls++
		}
	}
	return calls > n, nil
}

// camelToSnake turns "FailedPrecondition" into "Failed_Precondition".
func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// GetPluginInfo names the driver.
func (s *Server) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: s.cfg.Name, VendorVersion: "0.1.0"}, nil
}

// GetPluginCapabilities reports none: the driver has no controller.
func (s *Server) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

// Probe says the driver is ready.
func (s *Server) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

// NodeGetInfo reports the configured node ID, limit and topology.
func (s *Server) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.enter("NodeGetInfo", "-", "-"); err != nil {
		return nil, err
	}
	r := &csipb.NodeGetInfoResponse{NodeId: s.cfg.NodeID, MaxVolumesPerNode: s.cfg.MaxVolumes}
	if len(s.cfg.Topology) > 0 {
		r.AccessibleTopology = &csipb.Topology{Segments: s.cfg.Topology}
	}
	return r, nil
}

// NodeGetCapabilities reports STAGE_UNSTAGE_VOLUME and, unless
// Config.NoVolumeStats, GET_VOLUME_STATS; VOLUME_MOUNT_GROUP,
// EXPAND_VOLUME and SINGLE_NODE_MULTI_WRITER as configured.
func (s *Server) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	types := []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}
	if !s.cfg.NoVolumeStats {
		types = append(types, csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS)
	}
	if s.cfg.VolumeMountGroup {
		types = append(types, csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP)
	}
	if s.cfg.ExpandVolume {
		types = append(types, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)
	}
	if s.cfg.SingleNodeMultiWriter {
		types = append(types, csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	}
	var caps []*csipb.NodeServiceCapability
	for _, t := range types {
		caps = append(caps, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// volumeDir is where a volume's data lives; the handle is made a safe
// file name.
func (s *Server) volumeDir(handle string) string {
	return filepath.Join(s.cfg.StateDir, "volumes", strings.NewReplacer("/", "_", "..", "__").Replace(handle))
}

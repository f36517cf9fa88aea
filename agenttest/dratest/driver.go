package dratest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/clock"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// CallLogFile is the call log's name in the state dir.
const CallLogFile = "calls.log"

// The calls of the log.
const (
	CallPrepare   = "NodePrepareResources"
	CallUnprepare = "NodeUnprepareResources"
)

// cdiKind is the CDI kind ("vendor/class") of the driver's devices.
const cdiKind = "dra.nodekit.test/device"

// Config of a driver.
type Config struct {
	// Name is the driver name, a DNS subdomain (e.g. dra.nodekit.test).
	Name string
	// NodeName is the node whose ResourceSlice the driver publishes; the
	// pool has the same name.
	NodeName string
	// Devices is how many devices the slice lists (dev-0 ... dev-N-1).
	Devices int
	// CDIDir receives one CDI spec file per prepared claim.
	CDIDir string
	// StateDir holds calls.log and the health file (HealthFile).
	StateDir string
}

func (c Config) validate() error {
	switch {
	case c.Name == "":
		return errors.New("dratest: Config.Name is empty")
	case c.NodeName == "":
		return errors.New("dratest: Config.NodeName is empty")
	case c.Devices < 0:
		return fmt.Errorf("dratest: Config.Devices is %d, want 0 or more", c.Devices)
	case c.CDIDir == "":
		return errors.New("dratest: Config.CDIDir is empty")
	case c.StateDir == "":
		return errors.New("dratest: Config.StateDir is empty")
	}
	return nil
}

// Call is one line of the call log: one claim of one call.
type Call struct {
	Call      string    `json:"call"` // CallPrepare or CallUnprepare
	Namespace string    `json:"namespace"`
	Claim     string    `json:"claim"`
	UID       types.UID `json:"uid"`
	// Devices are the claim's devices of this driver ("dev-0"), on prepare.
	Devices []string `json:"devices,omitempty"`
	// CDIDeviceIDs are the IDs prepare returned.
	CDIDeviceIDs []string `json:"cdiDeviceIDs,omitempty"`
}

// Driver implements kubeletplugin.DRAPlugin: it prepares a claim by
// writing its CDI spec file, unprepares it by removing the file, and logs
// each claim of each call. Calls are serialized by the helper; the mutex
// guards the log for direct callers (tests).
type Driver struct {
	cfg Config
	mu  sync.Mutex
	// clock paces the health reports; nil is the real clock.
	clock clock.WithTicker
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// NewDriver checks cfg and creates the state and CDI dirs.
func NewDriver(cfg Config) (*Driver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{cfg.StateDir, cfg.CDIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("dratest: %w", err)
		}
	}
	return &Driver{cfg: cfg}, nil
}

// Resources is the driver's ResourceSlice content: one pool named after
// the node with Config.Devices devices.
func (d *Driver) Resources() resourceslice.DriverResources {
	devices := make([]resourceapi.Device, d.cfg.Devices)
	for i := range devices {
		devices[i] = resourceapi.Device{
			Name: fmt.Sprintf("dev-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: new(int64(i))},
			},
		}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
}

// PrepareResourceClaims writes each claim's CDI spec file (again, if it
// exists: preparing is idempotent) and returns its CDI device ID for each
// of the driver's allocated devices.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		res, call, err := d.prepare(c)
		if err != nil {
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		if err := d.log(call); err != nil {
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = res
	}
	return out, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, Call, error) {
	call := Call{Call: CallPrepare, Namespace: c.Namespace, Claim: c.Name, UID: c.UID}
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, call, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	var env []string
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != d.cfg.Name {
			continue
		}
		results = append(results, r)
		env = append(env, fmt.Sprintf("DRA_DEVICE_%s=%s", envName(r.Request), r.Device))
		call.Devices = append(call.Devices, r.Device)
	}
	if len(results) == 0 {
		return kubeletplugin.PrepareResult{}, call, nil
	}
	name := cdiDeviceName(c.UID)
	spec := cdispec.Spec{Version: "0.3.0", Kind: cdiKind, Devices: []cdispec.Device{{Name: name, ContainerEdits: cdispec.ContainerEdits{Env: env}}}}
	data, err := json.Marshal(spec)
	if err != nil {
		return kubeletplugin.PrepareResult{}, call, err
	}
	if err := writeAtomic(d.specPath(c.UID), data); err != nil {
		return kubeletplugin.PrepareResult{}, call, fmt.Errorf("write CDI spec of claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	id := cdiKind + "=" + name
	call.CDIDeviceIDs = []string{id}
	var res kubeletplugin.PrepareResult
	for _, r := range results {
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{id},
		})
	}
	return res, call, nil
}

// UnprepareResourceClaims removes each claim's CDI spec file; a claim
// that is not prepared is no error.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		if err == nil {
			err = d.log(Call{Call: CallUnprepare, Namespace: c.Namespace, Claim: c.Name, UID: c.UID})
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs background errors (publishing slices); the helper
// retries recoverable ones, and the test sees missing slices otherwise.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
}

// SpecPath is where the CDI spec of the claim uid is written.
func (d *Driver) specPath(uid types.UID) string {
	return filepath.Join(d.cfg.CDIDir, d.cfg.Name+"-"+string(uid)+".json")
}

func (d *Driver) log(c Call) error {
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(d.cfg.StateDir, CallLogFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadCalls reads the call log in dir (nothing when there is none).
func ReadCalls(dir string) ([]Call, error) {
	b, err := os.ReadFile(filepath.Join(dir, CallLogFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var calls []Call
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", CallLogFile, line, err)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// Count returns how many calls of kind call name the claim uid.
func Count(calls []Call, call string, uid types.UID) int {
	return len(slices.DeleteFunc(slices.Clone(calls), func(c Call) bool { return c.Call != call || c.UID != uid }))
}

// envName turns a request name (a DNS label, maybe with a subrequest
// "req/sub") into an environment variable suffix: upper case, '_' for
// '-' and '/'.
func envName(request string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", "/", "_").Replace(request))
}

// cdiDeviceName is unique per claim, so a runtime's cached spec of an
// earlier claim never answers for a new one.
func cdiDeviceName(uid types.UID) string { return "claim-" + string(uid) }

// writeAtomic writes data to path through a temporary file and a rename
// (fsutil.WriteFileAtomic), so the runtime's directory watch never reads
// half a spec.
func writeAtomic(path string, data []byte) error {
	return fsutil.WriteFileAtomic(path, data, 0o600, fsutil.NoSync(true))
}

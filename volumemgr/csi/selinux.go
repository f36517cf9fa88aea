package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/volumemgr"
)

// keySELinux is upstream's vol_data.json key of the context a volume was
// staged and published with.
const keySELinux = "seLinuxMountContext"

// seLinuxMountLabel returns the SELinux context the file system volume
// src is staged and published with (-o context="LABEL"), as upstream:
// req.SELinuxLabel when SELinux is enabled, the driver's CSIDriver has
// seLinuxMount: true and the volume is a PV (an inline volume never is);
// "" otherwise. For such a driver a pod whose label differs from that of
// another pod that has the volume set up on this node fails, with
// upstream's message, before anything is called (a pod with no label
// differs from one with a label); so does one whose label differs from
// the context the volume is staged with when no pod of this process has
// it (staged by an earlier run: stagedMismatch). The label is recorded
// for the pod until forgetSELinux. The caller holds the volume's lock.
func (p *Plugin) seLinuxMountLabel(ctx context.Context, req *volumemgr.SetUpRequest, src *source, pol *driverPolicy) (string, error) {
	if !pol.seLinuxMount || !p.cfg.SELinux.Enabled() {
		return "", nil
	}
	label := req.SELinuxLabel
	key := src.driver + "^" + src.handle
	p.seLinuxMu.Lock()
	defer p.seLinuxMu.Unlock()
	others := false
	for uid, other := range p.seLinux[key] {
		if uid == req.Pod.UID {
			continue
		}
		others = true
		if other != label && src.pv != nil {
			return "", fmt.Errorf("conflicting SELinux labels of volume %s: %q and %q", src.pv.Name, other, label)
		}
	}
	if !others && src.pv != nil {
		if err := p.stagedMismatch(ctx, src, label); err != nil {
			return "", err
		}
	}
	if p.seLinux[key] == nil {
		p.seLinux[key] = map[types.UID]string{}
	}
	p.seLinux[key][req.Pod.UID] = label
	if src.pv == nil {
		return "", nil
	}
	return label, nil
}

// stagedMismatch returns upstream's error for a pod whose label differs
// from the context src is staged with, as its staging vol_data.json
// records it (none: ""), when its staging path is mounted: the actual
// state upstream reconstructs after a restart. The pod waits until the
// volume is unstaged; publishing it there would give it the files of the
// other context. nil when the volume is not staged.
func (p *Plugin) stagedMismatch(ctx context.Context, src *source, label string) error {
	staging := p.stagingDir(src.driver, src.handle)
	data, err := readVolData(filepath.Dir(staging))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if data[keySELinux] == label {
		return nil
	}
	mounted, err := p.mounted(ctx, staging)
	if err != nil || !mounted {
		return err
	}
	return fmt.Errorf("waiting for unmount of volume %q, because it is already mounted to a different pod with a different SELinux label",
		PluginName+"/"+src.driver+"^"+src.handle)
}

// forgetSELinux drops pod's label of volume driver^handle.
func (p *Plugin) forgetSELinux(driver, handle string, pod types.UID) {
	key := driver + "^" + handle
	p.seLinuxMu.Lock()
	defer p.seLinuxMu.Unlock()
	delete(p.seLinux[key], pod)
	if len(p.seLinux[key]) == 0 {
		delete(p.seLinux, key)
	}
}

// contextCapability is the volume capability of the file system volume
// src, with the context="LABEL" mount option when seLinuxMountLabel gives
// a label, which it records in data (vol_data.json) and returns.
func (p *Plugin) contextCapability(ctx context.Context, req *volumemgr.SetUpRequest, src *source, pol *driverPolicy, mountGroup string,
	data map[string]string) (*csipb.VolumeCapability, string, error) {
	label, err := p.seLinuxMountLabel(ctx, req, src, pol)
	if err != nil {
		return nil, "", err
	}
	if label != "" {
		data[keySELinux] = label
	}
	return volumeCapability(src.mode, src.fsType, withContext(src.mountOptions, label), mountGroup), label, nil
}

// forgetSELinuxOnFailure forgets pod's label of src when the set-up
// failed (*err) before the volume was published for it: nothing may be
// torn down (no vol_data.json) to forget it later.
func (p *Plugin) forgetSELinuxOnFailure(err *error, src *source, pod types.UID, target string) {
	if *err != nil && !p.isPublished(target) {
		p.forgetSELinux(src.driver, src.handle, pod)
	}
}

// withContext adds upstream's context="LABEL" mount option to a copy of
// opts, when label is set.
func withContext(opts []string, label string) []string {
	if label == "" {
		return opts
	}
	return append(append([]string(nil), opts...), fmt.Sprintf("context=%q", label))
}

// needsRelabel is upstream's SELinuxRelabel of a published CSI volume: a
// writable volume not mounted with a context, on a file system that keeps
// labels (seclabel; never where SELinux is disabled).
func (p *Plugin) needsRelabel(src *source, label, target string) (bool, error) {
	if src.readOnly || label != "" {
		return false, nil
	}
	ok, err := p.cfg.SELinux.SupportsLabels(filepath.Clean(target))
	if err != nil {
		return false, fmt.Errorf("error checking for SELinux support: %w", err)
	}
	return ok, nil
}

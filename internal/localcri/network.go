package localcri

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

const (
	// netLockPath serialises subnet choice and bridge creation between
	// processes on this machine.
	netLockPath = "/run/nodekit-net.lock"
	// A bridge is named bridgePrefix + the third octet of its subnet + a
	// hash of the instance's dir (e.g. nk3-9f2c for 10.88.3.0/24), so that
	// the next instance to get that subnet does not reuse the name.
	bridgePrefix = "nk"
)

// podNetwork is the bridge and subnet one instance owns.
type podNetwork struct {
	Bridge  string
	Gateway net.IP
	Subnet  *net.IPNet
}

// poolBase is 10.88.0.0/16, carved into /24s.
func poolBase() net.IP { return net.IPv4(10, 88, 0, 0).To4() }

// allocateNetwork picks a free /24 of 10.88.0.0/16 and creates a bridge
// holding its .1 as gateway, all under a machine-wide lock so that
// concurrent instances never pick the same one.
func allocateNetwork(ctx context.Context, dir string) (podNetwork, error) {
	tag := sha256.Sum256([]byte(dir))
	unlock, err := lockFile(ctx, netLockPath)
	if err != nil {
		return podNetwork{}, fmt.Errorf("lock pod network pool: %w", err)
	}
	defer unlock()

	used, err := usedNetworks()
	if err != nil {
		return podNetwork{}, err
	}
	for i := 0; i < 256; i++ {
		ip := poolBase()
		ip[2] = byte(i)
		subnet := &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}
		if overlapsAny(subnet, used) {
			continue
		}
		name := fmt.Sprintf("%s%d-%x", bridgePrefix, i, tag[:2])
		if _, err := net.InterfaceByName(name); err == nil {
			continue
		}
		gw := append(net.IP(nil), ip...)
		gw[3] = 1
		n := podNetwork{Bridge: name, Gateway: gw, Subnet: subnet}
		if err := createBridge(ctx, n); err != nil {
			_ = deleteBridge(ctx, n)
			return podNetwork{}, err
		}
		return n, nil
	}
	return podNetwork{}, errors.New("allocate pod network: every /24 of 10.88.0.0/16 is in use on this machine")
}

func usedNetworks() ([]*net.IPNet, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	var out []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			out = append(out, n)
		}
	}
	return out, nil
}

func overlapsAny(n *net.IPNet, used []*net.IPNet) bool {
	for _, u := range used {
		if u.Contains(n.IP) || n.Contains(u.IP) {
			return true
		}
	}
	return false
}

// forwardRules keep pod traffic on the bridge: nothing is forwarded between
// the bridge and any other interface (the bridge plugin turns on
// ip_forward for a gateway bridge, and ipMasq stays off).
func forwardRules(bridge string) [][]string {
	comment := []string{"-m", "comment", "--comment", "nodekit localcri: pod traffic stays on " + bridge}
	return [][]string{
		append([]string{"FORWARD", "-i", bridge, "!", "-o", bridge}, append(comment, "-j", "DROP")...),
		append([]string{"FORWARD", "-o", bridge, "!", "-i", bridge}, append(comment, "-j", "DROP")...),
	}
}

func createBridge(ctx context.Context, n podNetwork) error {
	ones, _ := n.Subnet.Mask.Size()
	gw := n.Gateway.String() + "/" + strconv.Itoa(ones)
	for _, args := range [][]string{
		{"link", "add", n.Bridge, "type", "bridge"},
		{"addr", "add", gw, "dev", n.Bridge},
		{"link", "set", n.Bridge, "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("create bridge %s: %w", n.Bridge, err)
		}
	}
	for _, rule := range forwardRules(n.Bridge) {
		if err := run(ctx, "iptables", append([]string{"-w", "30", "-I"}, rule...)...); err != nil {
			return fmt.Errorf("isolate bridge %s: %w", n.Bridge, err)
		}
	}
	return nil
}

// deleteBridge removes the bridge and its forward rules; a missing bridge is
// not an error.
func deleteBridge(ctx context.Context, n podNetwork) error {
	var errs []error
	for _, rule := range forwardRules(n.Bridge) {
		// -C first so that a rule that is already gone is not an error.
		if run(ctx, "iptables", append([]string{"-w", "30", "-C"}, rule...)...) == nil {
			if err := run(ctx, "iptables", append([]string{"-w", "30", "-D"}, rule...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := net.InterfaceByName(n.Bridge); err == nil {
		if err := run(ctx, "ip", "link", "del", n.Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete bridge %s: %w", n.Bridge, err)
	}
	return nil
}

// writeCNIConfig writes the instance's only CNI network: a bridge with
// host-local IPAM (state under the instance's dir) and portmap. containerd
// adds the loopback interface itself (with the loopback plugin from the same
// bin dir).
func writeCNIConfig(l layout, n podNetwork) error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "nodekit-" + n.Bridge,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      n.Bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": l.cniIPAMDir,
					"ranges":  [][]map[string]string{{{"subnet": n.Subnet.String(), "gateway": n.Gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.cniConfDir, "10-nodekit.conflist"), data, 0o644)
}

// run runs a host command; its error carries the command and its output.
func run(ctx context.Context, name string, args ...string) error {
	p, err := lookPath(name)
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, p, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	klog.FromContext(ctx).V(4).Info("Ran", "cmd", name, "args", args)
	return nil
}

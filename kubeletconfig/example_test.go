package kubeletconfig_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodekit/nodekit/kubeletconfig"
)

// A base file, a drop-in over it, then validation: the drop-in wins, the
// defaults fill the rest, and a typo would have been refused by name.
func Example() {
	dir, _ := os.MkdirTemp("", "kubeletconfig")
	defer os.RemoveAll(dir)
	const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	_ = os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(header+"maxPods: 50\n"), 0o644)
	_ = os.Mkdir(filepath.Join(dir, "conf.d"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "conf.d", "10-pods.conf"), []byte(header+"maxPods: 80\n"), 0o644)

	ctx := context.Background()
	cfg, err := kubeletconfig.Load(ctx, filepath.Join(dir, "config.yaml"), filepath.Join(dir, "conf.d"))
	if err != nil {
		fmt.Println(err)
		return
	}
	gates, err := kubeletconfig.NewGates(ctx, cfg.FeatureGates)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("valid:", kubeletconfig.Validate(cfg, gates) == nil)
	fmt.Println("maxPods:", cfg.MaxPods, "syncFrequency:", cfg.SyncFrequency.Duration)

	_, err = kubeletconfig.Decode([]byte(header + "MAXPODS: 7\n"))
	fmt.Println(err)
	// Output:
	// valid: true
	// maxPods: 80 syncFrequency: 1m0s
	// unknown field "MAXPODS"
}

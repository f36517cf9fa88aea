// Command csitest-driver runs the test kit's CSI node driver (package
// csitest) on a unix socket until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nodekit/nodekit/agenttest/csitest"
)

func main() {
	var cfg csitest.Config
	var endpoint, registry, topology string
	flag.StringVar(&cfg.Name, "name", "csi.nodekit.test", "driver name")
	flag.StringVar(&cfg.NodeID, "node-id", "", "node ID NodeGetInfo reports (required)")
	flag.Int64Var(&cfg.MaxVolumes, "max-volumes", 0, "max_volumes_per_node")
	flag.StringVar(&topology, "topology", "", "accessible topology, KEY=VALUE[,KEY=VALUE...]")
	flag.StringVar(&cfg.StateDir, "state-dir", "", "volumes, calls.log and fail (required)")
	flag.StringVar(&endpoint, "endpoint", "", "CSI unix socket path (required)")
	flag.BoolVar(&cfg.NoVolumeStats, "no-volume-stats", false, "do not advertise GET_VOLUME_STATS")
	flag.BoolVar(&cfg.VolumeMountGroup, "volume-mount-group", false, "advertise VOLUME_MOUNT_GROUP (chgrp the published target)")
	flag.BoolVar(&cfg.ExpandVolume, "expand-volume", false, "advertise EXPAND_VOLUME (log NodeExpandVolume, grow block volumes)")
	flag.BoolVar(&cfg.SingleNodeMultiWriter, "single-node-multi-writer", false,
		"advertise SINGLE_NODE_MULTI_WRITER (take SINGLE_NODE_SINGLE_WRITER and SINGLE_NODE_MULTI_WRITER access modes)")
	flag.Int64Var(&cfg.BlockSize, "block-size", 0, "size in bytes of a new block volume's file (0: 16 MiB)")
	flag.BoolVar(&cfg.StageTmpfs, "stage-tmpfs", false, "stage a file system volume on a tmpfs of its own mounted with the mount flags (not a bind mount of its directory)")
	flag.StringVar(&registry, "registry-dir", "", "the agent's plugins_registry dir; empty: do not register")
	flag.Parse()
	if topology != "" {
		cfg.Topology = map[string]string{}
		for _, kv := range strings.Split(topology, ",") {
			k, v, _ := strings.Cut(kv, "=")
			cfg.Topology[k] = v
		}
	}
	//nolint:forbidigo // a main makes the root context
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	onStatus := func(ok bool, msg string) {
		fmt.Fprintf(os.Stderr, "registration status: registered=%v error=%q\n", ok, msg)
	}
	if err := csitest.Serve(ctx, cfg, endpoint, registry, onStatus); err != nil {
		fmt.Fprintln(os.Stderr, "csitest-driver:", err)
		os.Exit(1)
	}
}

package csi

import (
	"context"
	"fmt"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// nodeClient is a connection to a driver's CSI Node and Identity services.
// As upstream, the plugin opens one per operation: a driver may restart
// between operations. An operation's goroutine owns its client.
type nodeClient struct {
	conn *grpc.ClientConn
	node csipb.NodeClient
	// caps are the node capabilities the driver reported, asked once per
	// connection (upstream asks before each check; within one operation
	// the answer is the same).
	caps []*csipb.NodeServiceCapability
}

// dial connects to driver's endpoint, a unix socket path (with or without
// a unix:// prefix); with m, its calls are observed in m.
func dial(endpoint, driver string, m *Metrics) (*nodeClient, error) {
	target := endpoint
	if !strings.HasPrefix(target, "unix:") {
		target = "unix://" + target
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if m != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(m.interceptor(driver)))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to CSI endpoint %q: %w", endpoint, err)
	}
	return &nodeClient{conn: conn, node: csipb.NewNodeClient(conn)}, nil
}

func (c *nodeClient) Close() error { return c.conn.Close() }

// nodeInfo is what NodeGetInfo reports.
type nodeInfo struct {
	nodeID     string
	maxVolumes int64
	topology   map[string]string
}

func (c *nodeClient) getInfo(ctx context.Context) (*nodeInfo, error) {
	r, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return nil, err
	}
	ni := &nodeInfo{nodeID: r.GetNodeId(), maxVolumes: r.GetMaxVolumesPerNode()}
	if t := r.GetAccessibleTopology(); t != nil {
		ni.topology = t.GetSegments()
	}
	return ni, nil
}

// hasCapability reports whether the driver's node service has capability t.
func (c *nodeClient) hasCapability(ctx context.Context, t csipb.NodeServiceCapability_RPC_Type) (bool, error) {
	if c.caps == nil {
		r, err := c.node.NodeGetCapabilities(ctx, &csipb.NodeGetCapabilitiesRequest{})
		if err != nil {
			return false, err
		}
		c.caps = append([]*csipb.NodeServiceCapability{}, r.GetCapabilities()...)
	}
	for _, capability := range c.caps {
		if capability.GetRpc().GetType() == t {
			return true, nil
		}
	}
	return false, nil
}

// volumeCapability is the capability the plugin asks for: a mount of
// fsType with mountOptions, in the given access mode, owned by mountGroup
// when the driver applies the fsGroup ("" otherwise).
func volumeCapability(mode csipb.VolumeCapability_AccessMode_Mode, fsType string, mountOptions []string, mountGroup string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: mountOptions,
			VolumeMountGroup: mountGroup}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
	}
}

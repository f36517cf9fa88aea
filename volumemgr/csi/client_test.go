package csi

import (
	"context"
	"errors"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// capsNode answers NodeGetCapabilities with caps (or err) and counts the
// calls; any other RPC panics through the nil embedded client.
type capsNode struct {
	csipb.NodeClient
	caps  []csipb.NodeServiceCapability_RPC_Type
	err   error
	calls int
}

func (n *capsNode) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest, ...grpc.CallOption) (*csipb.NodeGetCapabilitiesResponse, error) {
	n.calls++
	if n.err != nil {
		return nil, n.err
	}
	r := &csipb.NodeGetCapabilitiesResponse{}
	for _, t := range n.caps {
		r.Capabilities = append(r.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return r, nil
}

// One connection asks the driver for its capabilities once, however many
// checks an operation makes; a failed answer is not kept.
func TestHasCapabilityAsksOncePerConnection(t *testing.T) {
	ctx := t.Context()
	failing := &capsNode{err: errors.New("driver restarting")}
	c := &nodeClient{node: failing}
	if _, err := c.hasCapability(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME); err == nil {
		t.Fatal("hasCapability with a failing driver: no error")
	}
	node := &capsNode{caps: []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS}}
	c.node = node
	for _, tc := range []struct {
		t    csipb.NodeServiceCapability_RPC_Type
		want bool
	}{
		{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, true},
		{csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER, false},
		{csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS, true},
		{csipb.NodeServiceCapability_RPC_EXPAND_VOLUME, false},
	} {
		got, err := c.hasCapability(ctx, tc.t)
		if err != nil || got != tc.want {
			t.Errorf("hasCapability(%v) = %v, %v; want %v", tc.t, got, err, tc.want)
		}
	}
	if node.calls != 1 {
		t.Errorf("NodeGetCapabilities called %d times for four checks on one connection, want 1", node.calls)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nodekit/nodekit/internal/fakecri"
	"github.com/nodekit/nodekit/internal/localcri"
)

// Runtimes, as --runtime takes them.
const (
	runtimeContainerd = "containerd"
	runtimeFake       = "fake"
)

// benchNode is where one agent's pods go: a CRI endpoint, the address the
// agent publishes as its node IP and where it serves its API.
type benchNode struct {
	endpoint string
	nodeIP   string
	// address is where the agent serves its API (KubeletConfiguration
	// address); port is its port, 0 meaning the default 10250.
	address string
	port    int
	// healthz is the kubelet's healthzBindAddress; "" turns its healthz
	// off (healthzPort 0), for both agents.
	healthz string
	// runtime names the runtime and its version for the report.
	runtime string
	// registryLog is the local registry's access log with --pull, else "".
	registryLog string
	stop        func(context.Context) error
}

// startNode starts the run's runtime in dir. containerd: a private
// containerd with the test images (internal/localcri); the agents publish
// and serve on its pod bridge's gateway. fake: internal/fakecri with the
// burst's image present; the agents publish the address of the host's
// default-route interface as node IP (nothing dials it) and serve on
// 127.0.0.1, on a free port, with the kubelet's healthz off, so nothing
// listens beyond loopback.
func startNode(ctx context.Context, o options, dir string) (*benchNode, error) {
	switch o.runtime {
	case runtimeFake:
		ip, err := defaultRouteIP()
		if err != nil {
			return nil, err
		}
		port, err := freePort(ctx)
		if err != nil {
			return nil, err
		}
		s, err := fakecri.Start(ctx, fakecri.Config{Dir: dir, Images: []string{localcri.BusyboxImage}})
		if err != nil {
			return nil, err
		}
		stop := func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // then calls in progress are cut
			defer cancel()
			return s.Stop(ctx)
		}
		return &benchNode{endpoint: s.Endpoint, nodeIP: ip, address: "127.0.0.1", port: port,
			runtime: "fake CRI (internal/fakecri: upstream's in-memory fakes over gRPC)", stop: stop}, nil
	default:
		if o.pull {
			return startPullNode(ctx, o, dir)
		}
		cri, err := localcri.Start(ctx, localcri.Config{Dir: dir, Version: o.containerd})
		if err != nil {
			return nil, err
		}
		gw := cri.Gateway.String()
		return &benchNode{endpoint: cri.Endpoint, nodeIP: gw, address: gw, healthz: gw,
			runtime: "containerd " + cri.RuntimeVersion, stop: cri.Stop}, nil
	}
}

// defaultRouteIP is the first IPv4 address of the interface the default
// route goes through (/proc/net/route), as a kubelet without --node-ip
// would pick.
func defaultRouteIP() (string, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 2 || fl[1] != "00000000" {
			continue
		}
		ifc, err := net.InterfaceByName(fl[0])
		if err != nil {
			return "", err
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", err
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no IPv4 address on the default route's interface (/proc/net/route): the fake runtime needs one as node IP")
}

// freePort is a TCP port on 127.0.0.1 free right now.
func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

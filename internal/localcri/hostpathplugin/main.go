// Command hostpathplugin is nodekit's stand-in for the proxy mode of
// csi-driver-host-path's hostpathplugin, the one mode upstream's DRA e2e
// specs use (test/e2e/dra/utils/deploy.go): e2e.test runs the DRA
// kubelet plugin itself and, for each socket the plugin serves, execs
//
//	/hostpathplugin --v=5 --endpoint=SOCKET --proxy-endpoint=tcp://:PORT
//
// in a pod on the node, then connects to PORT through the API server's
// pod port-forward. This program listens on both, pairs each connection
// a node-agent client makes to SOCKET with the next connection accepted
// on PORT (e2e.test opens those ahead of time) and copies bytes both ways
// until either side closes. It is not a CSI driver: any other mode or flag
// is refused. localcri builds it static (CGO_ENABLED=0) into the image
// registry.k8s.io/sig-storage/hostpathplugin (localcri.HostpathPluginImage)
// beside busybox, whose sh, base64, mkdir, mv, rm and test the specs exec
// to write CDI files. It uses the standard library only, so localcri can
// build it from its embedded source in a module of its own.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	//nolint:forbidigo // a main makes the root context
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hostpathplugin:", err)
		os.Exit(1)
	}
}

// run parses the command line and proxies until ctx is done.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("hostpathplugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "the unix socket to listen on (a path or unix:// URL)")
	proxyEndpoint := fs.String("proxy-endpoint", "", "the TCP address the peer connects to, tcp://[HOST]:PORT")
	verbosity := fs.Int("v", 0, "log verbosity (accepted as upstream's; every connection is logged)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	e, err := parseEndpoints(*endpoint, *proxyEndpoint)
	if err != nil {
		return err
	}
	unixL, tcpL, err := e.listen()
	if err != nil {
		return err
	}
	logger := log.New(stderr, "hostpathplugin: ", log.LstdFlags|log.Lmicroseconds)
	logger.Printf("proxying %s <-> %s (v=%d)", unixL.Addr(), tcpL.Addr(), *verbosity)
	return newProxy(logger).serve(ctx, unixL, tcpL)
}

package localcri

import (
	"context"
	"fmt"
	"path/filepath"
)

// Attach returns the instance running in dir (started detached earlier),
// after checking that its process is alive and its CRI answers. It fails
// when there is none.
func Attach(ctx context.Context, dir string) (*Containerd, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	st, err := readState(dir)
	if err != nil {
		return nil, fmt.Errorf("attach to containerd in %s: %w", dir, err)
	}
	if st.PID == 0 || !processMatches(st.PID, st.Config) {
		return nil, fmt.Errorf("attach to containerd in %s: process %d is not running", dir, st.PID)
	}
	cli, err := dialCRI(st.Socket)
	if err != nil {
		return nil, fmt.Errorf("attach to containerd in %s: %w", dir, err)
	}
	defer cli.Close()
	rv, err := cli.checkReady(ctx)
	if err != nil {
		return nil, fmt.Errorf("attach to containerd in %s: %w", dir, err)
	}
	n := st.network()
	version := st.Version
	if version == "" { // recorded before versions were
		version = Containerd16
	}
	return &Containerd{
		Dir: dir, Socket: st.Socket, Endpoint: "unix://" + st.Socket,
		Bridge: n.Bridge, Gateway: n.Gateway, Subnet: n.Subnet, st: st,
		Version: version, RuntimeVersion: rv,
		detach: true, // only a detached instance outlives its starter
	}, nil
}

package localvm_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/nodekit/nodekit/internal/localvm"
)

// Boot the guest image of $NODEKIT_BIN_DIR/vm, run a script on its cgroup
// v2 hierarchy and read what it printed. (Not run by go test: a boot takes
// a minute under TCG.)
func Example() {
	if localvm.Available("") != nil {
		return
	}
	ctx := context.Background()
	work, _ := os.MkdirTemp("", "nkvm")
	defer os.RemoveAll(work)
	res, err := localvm.Run(ctx, localvm.Config{
		WorkDir: work,
		Script:  "cat /sys/fs/cgroup/cgroup.controllers",
		Shares:  []localvm.Share{{HostPath: "/usr/share/doc", ReadOnly: true}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Accel, res.ExitCode, strings.Contains(res.Output, "memory"))
}

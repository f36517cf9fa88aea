package localsystemd_test

import (
	"context"
	"fmt"
	"os"

	"github.com/nodekit/nodekit/internal/localsystemd"
)

// Start a private systemd, talk to it over its own system bus, stop it.
func Example() {
	if localsystemd.Available() != nil {
		return
	}
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "nksd")
	defer os.RemoveAll(dir)
	sd, err := localsystemd.Start(ctx, localsystemd.Config{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = sd.Stop(ctx) }()
	state, _ := sd.SystemState(ctx)
	fmt.Println(state, sd.BusAddress != "")
}

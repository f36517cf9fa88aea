package selinuxtest_test

import (
	"fmt"
	"os"

	"github.com/nodekit/nodekit/internal/selinux/selinuxtest"
)

// Tests run against the Fake unless $NODEKIT_SELINUX=host asks for the
// real host.
func Example() {
	fmt.Println(selinuxtest.Real() == (os.Getenv(selinuxtest.HostEnv) == "host"))
	// Output: true
}

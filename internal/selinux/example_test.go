package selinux_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/internal/selinux"
)

// The file label of a pod's seLinuxOptions, as an SELinux host computes
// it: the user and level are the options', the role and type the file's.
func Example() {
	label, err := selinux.Fake{}.FileLabel(&v1.SELinuxOptions{Type: "spc_t", Level: "s0:c1,c2"})
	fmt.Println(label, err)
	// Output: system_u:object_r:container_file_t:s0:c1,c2 <nil>
}

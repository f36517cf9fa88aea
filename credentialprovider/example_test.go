package credentialprovider_test

import (
	"fmt"

	"github.com/nodekit/nodekit/credentialprovider"
)

// A provider's matchImages and the keys of its answer match images label
// by label, with globs, as kubelet's do.
func ExampleMatch() {
	for _, image := range []string{"123.dkr.ecr.us-east-1.amazonaws.com/app", "dkr.ecr.us-east-1.amazonaws.com/app", "quay.io/app"} {
		fmt.Println(image, credentialprovider.Match("*.dkr.ecr.*.amazonaws.com", image))
	}
	// Output:
	// 123.dkr.ecr.us-east-1.amazonaws.com/app true
	// dkr.ecr.us-east-1.amazonaws.com/app false
	// quay.io/app false
}

package pullrecords_test

import (
	"context"
	"fmt"
	"os"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/pullrecords"
)

// A pod's pull secret pulls a private image; another pod without the
// secret must pull it itself before it may use the node's copy.
func Example() {
	root, _ := os.MkdirTemp("", "pullrecords")
	defer os.RemoveAll(root)
	ctx := context.Background()
	v, err := pullrecords.New(ctx, pullrecords.Config{RootDir: root})
	if err != nil {
		fmt.Println(err)
		return
	}
	image, id := "private.example/team/app:1.0", "sha256:0123"
	secret := kubeletv1beta1.ImagePullSecret{Namespace: "team-a", Name: "regcred", UID: "u1", CredentialHash: "h1"}

	// The pod's credentials, asked for only when a record has some to match.
	podSecret := func() ([]kubeletv1beta1.ImagePullSecret, *kubeletv1beta1.ImagePullServiceAccount) {
		return []kubeletv1beta1.ImagePullSecret{secret}, nil
	}
	fmt.Println("preloaded, must pull:", v.MustPull(ctx, image, id, nil))
	if err := v.RecordIntent(ctx, image); err != nil {
		fmt.Println(err)
		return
	}
	v.RecordPulled(ctx, image, id, &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secret}})
	fmt.Println("with the secret, must pull:", v.MustPull(ctx, image, id, podSecret))
	fmt.Println("without it, must pull:", v.MustPull(ctx, image, id, nil))
	// Output:
	// preloaded, must pull: false
	// with the secret, must pull: false
	// without it, must pull: true
}

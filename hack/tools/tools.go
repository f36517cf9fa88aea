//go:build tools

// Package tools pins the upstream binaries nodekit builds for its local
// control plane and test images. It is never imported.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/test/images/agnhost"
)

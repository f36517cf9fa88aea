// Package localregistry runs the CNCF distribution registry on loopback for
// tests that pull images: TLS from a fresh test CA, optional htpasswd
// (bcrypt) authentication, storage in a directory of its own. Push copies
// an OCI image layout tarball (the images internal/localcri builds) into it
// over the OCI distribution push API, so a containerd whose registry hosts
// point here (localcri.Config.Mirrors) pulls for real.
//
// It owns the registry process, its config, certificates and storage; it
// does not configure containerd, and it never talks to anything but the
// registry it started.
//
//	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: dir})
//	defer reg.Stop(ctx)
//	err = reg.Push(ctx, "/cache/busybox.tar", "registry.k8s.io/e2e-test-images/busybox:1.37.0-2")
package localregistry

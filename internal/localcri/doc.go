// Package localcri runs a private containerd for tests and hack scripts:
// containerd + runc + a CNI bridge from the host's packages, with a config,
// a pod network and local test images of its own, so that several instances
// (and a system containerd) can run side by side on one machine.
//
// Config.Version (default $NODEKIT_CONTAINERD, else "1.6") picks the
// containerd: Debian's 1.6 with its shim and runc (config version 2), or
// containerd 2 with its shim and a newer runc from <BinDir>/containerd2,
// built by hack/build-containerd2.sh (config version 3, NRI off). The
// containerd 2 directory is on the PATH of that containerd process only, so
// a 1.6 instance beside it keeps Debian's shim and runc. Start logs the
// version the CRI reports ("containerd is ready").
//
// What it owns, per instance, all under Config.Dir: containerd's root and
// state, its gRPC and ttrpc sockets, config.toml, the runc root, the CNI
// config and host-local IPAM state, network namespaces, logs
// (Dir/logs/containerd.log), the pidfile and instance.json. Outside Dir it
// owns one bridge (nkN-XXXX) holding the gateway of a /24 of 10.88.0.0/16
// (chosen under the flock /run/nodekit-net.lock by skipping subnets already
// on an interface) and two iptables FORWARD rules that keep pod traffic on
// that bridge. Stop removes the pods through the CRI, stops containerd,
// kills the shims and containers it knows about, unmounts what is mounted
// under Dir and deletes the bridge and the rules.
//
// It also builds the images upstream node tests use (busybox, pause and
// agnhost) as OCI image layout tarballs, in Go and deterministically, caches
// them in Config.ImageCache and imports them at start; no registry is
// needed. Their busybox is Config.BinDir/busybox, upstream busybox built
// static by hack/build-busybox.sh (hack/build-tools.sh busybox); without it
// Start fails and names that command. /bin/sh is busybox's ash in every
// image but agnhost. The agnhost image needs a static agnhost binary in
// Config.BinDir and is left out, with a logged warning, without one. Like
// upstream's agnhost image it carries bash (its /bin/sh), curl, iproute2's
// ip and netcat, copied from this machine with the shared libraries ldd
// names. With Config.ConformanceImages it adds the images only upstream
// conformance specs use: nonewprivs, nginx, and hostpathplugin, a stand-in
// for csi-driver-host-path's hostpathplugin that serves only the proxy
// mode the DRA e2e specs use (the program in ./hostpathplugin, built
// static with the go command). Config.CDIDirs adds CDI spec directories
// for containerd 2 (upstream's DRA test driver writes to /var/run/cdi).
//
// What it does not own or do: it installs and builds nothing (containerd,
// runc, iptables and the CNI plugins in /usr/lib/cni must
// be there; containerd 2 and busybox must have been built), pulls nothing, never masquerades pod traffic, and does not undo
// host-wide settings the CNI plugins make (the bridge plugin turns on
// net.ipv4.ip_forward; libcni keeps its result cache in /var/lib/cni while
// a pod exists). Container cgroups go under the cgroupfs parent the CRI
// caller asks for (containerd's default is /k8s.io/<id>). It is not a
// general containerd manager: one config, made for node-agent tests.
//
// With Config.Systemd, containerd runs in the PID, mount and cgroup
// namespaces of a systemd of the caller's own (internal/localsystemd's
// Enter) with SystemdCgroup = true and that systemd's bus: each
// container is a cri-containerd-<id>.scope in the slice its CRI caller
// names, as on a host booted by systemd. What containerd mounts (rootfs
// overlays, network namespaces) is then in that mount namespace: Stop
// unmounts it through the same prefix while containerd ran, and
// otherwise it goes with the namespace.
package localcri

// Package selinux is the host's SELinux as the node agent's volumes see it:
// whether SELinux is enabled, the file label a pod's or container's
// seLinuxOptions give, and whether a mounted file system keeps labels
// (seclabel). Host is the real one, over github.com/opencontainers/selinux
// and /proc/self/mountinfo; Fake stands in for an SELinux host in tests.
// The volume rules that use them (which volumes relabel, context= mounts)
// live in volumemgr and criruntime, not here.
//
// Host's label translation is upstream kubelet's real one: go-selinux's
// label.InitLabels over the policy's lxc_contexts, whose file label the
// options' user and level replace (their role and type are the
// process's), a missing level being a random pair of categories at each
// call, empty options no label. Both run on a real SELinux host in
// internal/localvm's TestSELinux (Debian 12's reference policy,
// permissive, booted with localvm.SELinuxPermissive; selinuxtest's
// $NODEKIT_SELINUX=host switch), which checks Host's labels against the
// kernel's policy, a context= mount of one and seclabel as the kernel
// reports it (ext4 and tmpfs keep labels; proc and a context= mount do
// not). Debian 12's policy names container_t and container_file_t in
// lxc_contexts without declaring them; the guest image adds a module that
// declares them, as Fedora's container-selinux does, or the kernel
// refuses every label kubelet and nodekit compute.
//
// Fake translates as Host does on such a host, where upstream's fake
// translator (which it followed before the real host showed otherwise)
// keeps the options' role and type and labels empty options.
package selinux

// Package podopts owns the node-side settings of a pod's containers: the
// environment (service links, envFrom, env with $(VAR) expansion and the
// downward API, ConfigMap and Secret references), the pod's hostname and
// domain, its resolv.conf per dnsPolicy, and its managed /etc/hosts file.
// Builder joins them into a nodekit.ContainerOptionsFunc and the sandbox
// settings, with upstream kubelet v1.37 semantics and error messages.
//
// It does not own volumes (volumemgr mounts them; Builder.VolumeMounts and,
// for raw block devices, Builder.VolumeDevices are where they plug in) nor running containers (the nodekit.Runtime creates
// them from the options and expands $(VAR) in command and args). It reads
// ConfigMaps, Secrets and Services through three one-method interfaces;
// FromClient adapts a kubeclient.Interface (a kubeclient.Client, or a
// client-go clientset through kubeclient/clientgo).
//
//	b := &podopts.Builder{
//		Env: podopts.NewResolver(podopts.Config{ConfigMaps: c, Secrets: c, Services: c, NodeIPs: ips}),
//		DNS: &podopts.DNSConfigurer{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: "/etc/resolv.conf"},
//	}
//	sandbox, err := b.Sandbox(ctx, pod)
//	req := nodekit.SyncPodRequest{Pod: pod, Sandbox: sandbox, Options: b.Options(podDir), ...}
package podopts

// Package criruntime implements nodekit.Runtime over any CRI v1 endpoint
// (containerd, CRI-O, ...): pod sandboxes, images with pull policies and pull
// secrets (then Config.Credentials, the credential provider plugins, as
// upstream's keyring orders them), containers with their configuration,
// graceful stop, listing and status.
//
// It carries out the actions it is given; it does not decide restarts,
// back-off or ordering (the sync loop does). What other packages need
// beyond nodekit.Runtime are plain methods matching small interfaces they
// declare, handed to them by the main: ExecSync (probes.Execer),
// RemoveContainer and RemovePodSandbox (gc.ContainerRuntime), image
// listing and removal (gc.ImageService), Ready (the loop's Config.Health).
// Two are found on the Runtime by type assertion, with a fallback:
// ContainerEvents (pleg.New's evented PLEG; without it, relisting alone)
// and RemoveContainer (syncloop.ContainerRemover, for restarting all
// containers of a pod).
//
// Security settings reach the runtime as upstream kubelet sends them:
// seccomp (Localhost profiles under Config.RootDir/seccomp,
// Config.SeccompDefault), AppArmor (field or deprecated annotation),
// SELinux options (and, only where SELinux is enabled, CRI
// selinux_relabel on the mounts whose nodekit.Mount.SELinuxRelabel asks for
// it and on the termination-message file, as upstream's kuberuntime;
// Config.SELinux, the real host by default), procMount, supplemental
// groups and their policy, and
// user namespaces: a pod with hostUsers: false gets a range of host IDs of
// its own (package userns, checkpointed in the pod's directory), and fails
// sandbox creation with upstream's message when the runtime handler does
// not support user namespaces. SetNodeStatus publishes the runtime's
// features and handlers on the Node.
//
// Image volumes (volumes[].image) are pulled as upstream, but only for the
// containers that mount them: before such a container starts, each image
// volume it mounts is made present once per sync with the pod's pull
// secrets and the volume's pull policy (the events and reasons of
// container images). Upstream pulls every image volume before any
// container starts; pulling lazily means a container that mounts none does
// not retry a pull the sync loop holds in back-off. A container that
// mounts one whose pull failed fails with that reason (ErrImagePull,
// ErrImageNeverPull...) and ActionError.Image naming the volume's image, so
// the sync loop's image-pull back-off (ImagePullBackOff) is kept for that
// image. Pull failures read as upstream's: the ErrImagePull message is the
// pull's error, the event `Failed to pull image "X": ERR` then "Error:
// ErrImagePull"; a second container of an image whose pull failed in the
// same sync gets ImagePullBackOff without a pull. A mount
// with nodekit.Mount.Image set becomes a CRI mount of the image by ID,
// with its subPath, read-only and never relabelled; a subPath the image
// lacks is the runtime's CreateContainerError.
//
// Divergence: CRI reports no image-volume feature and upstream kubelet does
// not check for one. containerd before 2.1 drops the image of a mount; 1.6
// then fails container creation with `failed to mkdir "": mkdir : no such
// file or directory`. criruntime reads the runtime's CRI Version instead
// and, on containerd older than 2.1, fails a container that mounts an image
// volume with CreateContainerConfigError "image volume NAME (image REF)
// cannot be mounted: container runtime containerd VERSION does not support
// image volumes (containerd 2.1 or later does)", pulling nothing. Other
// runtimes are trusted to support them.
//
// Divergence: upstream kubelet asks the runtime for every new pod's
// sandbox at once. With Config.MaxParallelSandboxCreations the pods over
// the bound wait their turn (fullagent: twice the CPUs), because on a
// small machine a hundred sandboxes created at once share the CPUs until
// all of them finish late: on 2 CPUs and containerd 1.6, 100 new pods were
// all Running in 15-16s with a bound of 2 or 4, and in 19s without (half
// of them in 7s against 14.5s). A turn is given back after 5s even by a
// call still in progress, so a CNI plugin that hangs for one pod delays
// the others by that much at most.
//
// Containers and sandboxes carry exactly the labels, annotations and CRI
// metadata the upstream kubelet v1.37 writes (io.kubernetes.pod.uid,
// io.kubernetes.container.hash with kubelet's hash of name and image, the
// restart count, ...), so a restarted agent, crictl, or a kubelet taking
// the node over (or handing it over) adopts the running containers.
//
// With Config.Metrics every CRI call is timed and counted under
// upstream kubelet's operation_type names (run_podsandbox,
// create_container, pull_image, ...), and image pulls, sandbox runs and
// container starts feed kubelet_image_pull_duration_seconds,
// kubelet_started_pods_total and kubelet_started_containers_total.
// With Config.TracerProvider every CRI call New's connections make is an
// OpenTelemetry client span (cri-client's otelgrpc instrumentation, as
// kubelet's), a child of the span in the call's context.
//
//	rt, err := criruntime.New(ctx, criruntime.Config{Endpoint: "unix:///run/containerd/containerd.sock"})
//	res := rt.SyncPod(ctx, nodekit.SyncPodRequest{Pod: pod, Actions: actions})
//	if err := res.Err(); errors.Is(err, nodekit.ErrImagePull) { ... }
package criruntime

// Package volumemgr owns the volumes of the pods on a node: the desired
// state (the pods it is given and the volumes their containers mount), the
// actual state (what is set up under ROOT/pods/UID/volumes), the reconciler
// that converges the two, and the volume plugins behind the small Plugin
// interface: emptyDir (disk, or tmpfs for medium Memory), hostPath (with the
// upstream type checks), configMap, secret, downwardAPI and projected
// (configMap, secret, downwardAPI and service-account token sources), and
// image (volumes[].image, as upstream's stub plugin: nothing on the host;
// the mount carries the image reference and subPath in nodekit.Mount.Image
// and ImageSubPath, read-only, and the Runtime pulls and mounts the image).
// It also turns a container's volumeMounts into nodekit.Mounts, with safe
// subPath and subPathExpr handling, and counts both states in
// volume_manager_total_volumes (RegisterMetrics; a plugin's fully
// qualified names through the optional QualifiedNamer).
//
// A volume's directory is PLUGIN-DIR/NAME, NAME the pod volume's unless the
// plugin is a DirNamer (asked once per volume, before its first set-up):
// upstream names it by the volume spec, a claim's by its PV. A volume
// found on disk after a restart in the directory so named is the pod's
// volume: set up again, and forgotten as a found one, never torn down
// while the pod runs.
//
// It does not create containers (the pod worker waits on it before it
// does), does not remove pod directories themselves (the loop's
// housekeeping does, once nothing is mounted below them), and has no
// in-tree network-storage volumes. Raw block volumes (volumeDevices) are
// a plugin's: its SetUpResult.Device is the device ContainerDevices gives
// the container, and a volume whose plugin gives none fails its set-up
// when a container names it in volumeDevices; after a restart the
// entries of POD/volumeDevices/PLUGIN (upstream's pod device map paths)
// are found as volumes too, each forgotten once the re-added pod's volume
// sets up with that entry as its device; CSI volumes
// (persistentVolumeClaim, ephemeral, csi) come from the plugin in
// volumemgr/csi, given in Config.Plugins (which also keeps a PV whose
// only access mode is ReadWriteOncePod to one pod on the node, as
// upstream's mount operation: another pod's set-up fails with a
// FailedMount event and is retried until the first pod's volume is torn
// down). Without a plugin for a volume
// WaitForAttachAndMount fails at once for a pod using it, with upstream's
// "failed to process volumes=[...]: ... no volume plugin matched" (the pod worker reports it as FailedMount and retries with
// back-off; the pod stays in ContainerCreating), and the reconciler never
// tries to set such a volume up. A plugin's ProcessError (process.go: what
// upstream meets while it processes the pod's volumes into its desired
// state, such as a claim not bound) is reported the same way, once every
// other volume of the pod not mounted had its first set-up, with no
// FailedMount event of the reconciler, and retried within two seconds.
//
//	pod worker                    Manager                      reconciler (Run)
//	   │ WaitForAttachAndMount ──►  desired += pod  ──wake──►  SetUp each volume
//	   │ ◄── nil / error naming the volumes ──────────────────  (retry with back-off,
//	   │ ContainerMounts ───────►  host paths, subPath binds     FailedMount events)
//	   │                                                        refresh content every
//	   │                                                        RefreshPeriod, tokens
//	   │                                                        at 80% of lifetime
//	   │ WaitForUnmount ────────►  desired -= pod   ──wake──►  TearDown each volume,
//	   │ ◄── nil when all torn down ──────────────────────────  remove volume dirs
//
// Volumes that a controller attaches to the node (a plugin implementing
// AttachablePlugin names them: CSI volumes whose driver requires
// attachment) follow upstream's contract with the attach/detach
// controller (inuse.go): VolumesInUse lists them, sorted, from the moment
// a set-up is decided until they are torn down, for the node status's
// volumesInUse (once StatesSynced); their SetUp runs only after
// MarkVolumesAsReportedInUse says the node's status lists them (the
// ReportedInUse gate), so the controller never detaches a volume the node
// is mounting or has mounted. A set-up that waits on the attachment
// returns a PendingError (retried within 2 s, no event; listed among
// WaitForAttachAndMount's "unattached volumes"); once past that wait, a
// failing set-up's back-off starts again at 500 ms, as upstream's mount
// operation has a back-off of its own after the attach verification; a
// StepError names the upstream step in the FailedMount event.
//
// SELinux (selinux.go, Config.SELinux; the real host's by default): where
// SELinux is enabled, each volume's label is that of the containers that
// mount it, as upstream's desired state computes it (none with the pod's
// seLinuxChangePolicy Recursive), handed to the plugin as
// SetUpRequest.SELinuxLabel for a context mount (volumemgr/csi); differing
// or untranslatable labels fail a PV-backed volume before set-up
// ("failed to process volumes=[NAME]: multiple SELinux labels found:
// ..."), and leave other volumes unlabeled as upstream. Each mount's
// nodekit.Mount.SELinuxRelabel is its plugin's SetUpResult.SELinuxRelabel
// (upstream's Managed and SELinuxRelabel attributes: emptyDir, configMap,
// secret, downwardAPI and projected yes; hostPath and image no), whatever
// the host: the Runtime sends it only where SELinux is enabled. A
// volume's label is the one first computed for the pod: upstream fixes it
// when the volume enters its desired state, and options without a level
// translate to random categories at each call on a real host. Unlike
// upstream, the volume_manager_selinux_* metrics are not kept. These
// paths run against the real host's kernel and policy, not only
// internal/selinux's Fake, in internal/localvm's TestSELinux (an SELinux
// guest, $NODEKIT_SELINUX=host).
//
// Content volumes are written atomically as upstream (a timestamped
// directory and a ..data symlink swapped by rename, with user-visible
// symlinks into it). Secret, downwardAPI and projected volumes each live on
// a tmpfs of their own, so secrets and tokens never reach the disk. After a
// restart the first Reconcile scans the pod directories and the mount table:
// volumes of pods that are added again are adopted, the others are torn down
// once the caller says their pods are gone (RemovePod or CleanupPods).
//
// Usage:
//
//	c := volumemgr.FromClient(client) // a kubeclient.Interface
//	m, err := volumemgr.New(volumemgr.Config{RootDir: root, Objects: c, Tokens: c, Events: recorder})
//	go m.Run(ctx)
//	err = m.WaitForAttachAndMount(ctx, pod) // before creating containers
//	mounts, err := m.ContainerMounts(ctx, pod, &pod.Spec.Containers[0])
//	err = m.WaitForUnmount(ctx, pod) // after the containers stopped
package volumemgr

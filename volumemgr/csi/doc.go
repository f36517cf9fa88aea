// Package csi is the CSI volume plugin of volumemgr and the registration
// handler of CSI node drivers.
//
// It lives under volumemgr because it is one of volumemgr's plugins: it
// implements volumemgr.Plugin (Config.Plugins) and reuses volumemgr's
// fsGroup ownership code, and nothing else in nodekit needs it. It owns:
//
//   - Drivers, the registry of registered CSI drivers (name → endpoint and
//     highest supported CSI version);
//   - Handler, the plugin-registration handler a plugin watcher calls
//     (ValidatePlugin, RegisterPlugin, DeRegisterPlugin, as upstream's
//     csi RegistrationHandler): it checks the versions as upstream, calls
//     NodeGetInfo, and keeps the node's CSINode object (driver, node ID,
//     topology keys, allocatable count), the node's
//     csi.volume.kubernetes.io/nodeid annotation and its topology labels;
//   - Plugin, the "kubernetes.io/csi" volume plugin for persistentVolumeClaim
//     volumes bound to a PV with spec.csi, csi inline volumes (the CSIDriver
//     must list the Ephemeral lifecycle mode) and generic ephemeral volumes
//     (the PVC POD-VOLUME, which the pod must control): NodeStageVolume into
//     ROOT/plugins/kubernetes.io/csi/DRIVER/SHA256(HANDLE)/globalmount when the
//     driver has STAGE_UNSTAGE_VOLUME (once per volume while the process
//     runs; after a restart a running pod's volumes are staged and
//     published once again, as upstream's reconstructed volumes, which it
//     marks uncertain, are), NodePublishVolume into
//     POD/volumes/kubernetes.io~csi/NAME/mount with upstream's vol_data.json
//     beside it, NAME upstream's volume spec name (VolumeDirName, a
//     volumemgr.DirNamer): the bound PV's for a claim, the pod volume's for
//     an inline volume, so that kubelet and nodekit find each other's
//     volumes when one takes over a node from the other (a claim nodekit
//     published under the pod volume's name before this layout stays
//     there until its pod goes), the secrets a PV's nodeStageSecretRef and
//     nodePublishSecretRef (or an inline volume's nodePublishSecretRef, in
//     the pod's namespace) name passed to the driver, as upstream, the
//     CSIDriver's tokenRequests (service-account tokens of the pod, in the
//     volume context or, with serviceAccountTokenInSecrets, the secrets;
//     PluginConfig.Tokens) and requiresRepublish (SetUp asks volumemgr to
//     call it again every refresh period), the pod's fsGroup handed to a
//     driver with VOLUME_MOUNT_GROUP in the capability (the node then
//     leaves ownership alone), and
//     NodeUnpublishVolume / NodeUnstageVolume (when no other
//     pod uses the staged volume) on tear-down; raw block volumes (a
//     PV of volumeMode Block in volumeDevices, block.go), laid out exactly
//     as upstream's csiBlockMapper, so that kubelet and nodekit find each
//     other's block volumes on a node: upstream's vol_data.json (its five
//     keys) in ROOT/plugins/kubernetes.io/csi/volumeDevices/PV/data and
//     nothing in the pod's volume directory, NodeStageVolume with a block
//     capability into ROOT/plugins/kubernetes.io/csi/volumeDevices/staging/PV,
//     NodePublishVolume to the file .../volumeDevices/publish/PV/PODUID,
//     and the link POD/volumeDevices/kubernetes.io~csi/PV to it as the
//     device (SetUpResult.Device; after a restart volumemgr finds the
//     volume by it, and TearDown reads the data of the PV it names),
//     upstream's descriptor lock (the
//     device bind-mounted on .../volumeDevices/PV/dev/PODUID, a loop
//     device on that, with losetup), NodeUnstageVolume and the removal of
//     .../volumeDevices/PV once no pod publishes the volume; a block
//     volume of nodekit's earlier layout (vol_data.json with volumeMode
//     Block in POD/volumes/kubernetes.io~csi/VOLUME) is still torn down
//     from there, and moved to upstream's layout (that file and directory
//     removed) when its pod sets it up again; with upstream's errors for a Block
//     PV in volumeMounts or a Filesystem volume in volumeDevices; online
//     expansion (expand.go): a PV grown past its claim's status.capacity
//     is expanded with NodeExpandVolume on the published path when the
//     driver has EXPAND_VOLUME, looked at again every refresh period,
//     and the claim's status patched as upstream's node expander does
//     (PluginConfig.Events gets FileSystemResizeSuccessful); VolumeStats, the
//     NodeGetVolumeStats of a published volume when the driver advertises
//     GET_VOLUME_STATS (none otherwise, as upstream), for the Summary API;
//   - Metrics: csi_operations_seconds (every driver call) and
//     storage_operation_duration_seconds (volume_mount, volume_unmount,
//     unmount_device of CSI volumes; map_volume, unmap_volume and
//     unmap_device of block volumes), registered where the caller says.
//
// Volumes of a driver that requires attachment (CSIDriver attachRequired
// true, or no CSIDriver object, as upstream) are attached by the
// attach/detach controller of kube-controller-manager and the driver's
// external attacher (attach.go), with PluginConfig.Attach set: Plugin is a
// volumemgr.AttachablePlugin, naming such volumes
// kubernetes.io/csi/DRIVER^HANDLE (UniqueVolumeName) so that volumemgr
// reports them in node.status.volumesInUse and holds their set-up until
// the node's status lists them; SetUp then waits, as upstream's
// VerifyControllerAttachedVolume, for status.volumesAttached to list the
// volume (a volumemgr.PendingError: retried, no event), and, as upstream's
// csi attacher's WaitForAttach, for the VolumeAttachment
// csi-SHA256(HANDLE DRIVER NODE) to say attached (FailedMount
// "MountVolume.WaitForAttach failed for volume PV : ...", the attacher's
// attachError when it has one); its status.attachmentMetadata is the
// publish context of NodeStageVolume and NodePublishVolume. Without
// PluginConfig.Attach such volumes fail SetUp with an error saying so.
//
// SELinux (selinux.go, PluginConfig.SELinux; the real host's by default):
// where SELinux is enabled and the CSIDriver has seLinuxMount: true, a PV
// file system volume is staged and published with the mount option
// context="LABEL" (SetUpRequest.SELinuxLabel), recorded as
// seLinuxMountContext in both vol_data.json files, as upstream; such a
// volume is not relabeled by the runtime, while any other writable one
// is when its file system has seclabel (SetUpResult.SELinuxRelabel). A
// pod whose label differs from that of another pod with the volume set up
// fails with upstream's `conflicting SELinux labels of volume PV: "A" and
// "B"`; upstream finds it in its desired state, before any mount, and
// reports it among "failed to process volumes", here it is the volume's
// SetUp error (no driver called), retried with back-off. A volume staged
// by an earlier run (no pod of this process has it) keeps the context its
// staging vol_data.json records: a pod with another label waits, with
// upstream's `waiting for unmount of volume "kubernetes.io/csi/DRIVER^HANDLE",
// because it is already mounted to a different pod with a different
// SELinux label`, until the volume is unstaged, as upstream's
// reconstructed actual state makes it. Raw block volumes get no context,
// as upstream. internal/localvm's TestSELinux runs these tests on a real
// SELinux host with the test driver mounting what it is asked (context=
// in mountinfo, the files' labels).
//
// A set-up error names upstream's operation step and the volume's spec
// name (a claim's PV, an inline volume's pod volume name) in the
// FailedMount event, as upstream's operation generator: "MountVolume.MountDevice
// failed for volume PV : ..." for a NodeStageVolume error,
// "MountVolume.SetUp failed ..." for NodePublishVolume and the rest
// (MapVolume.SetUpDevice and MapVolume.MapPodDevice for a block volume).
// The volume capability's access mode is the PV's first access mode
// (ReadWriteOnce for an inline volume or a PV with none), mapped as
// upstream maps it (accessmode.go): for a driver whose node service has
// the SINGLE_NODE_MULTI_WRITER capability (asked at each SetUp)
// ReadWriteOnce is SINGLE_NODE_MULTI_WRITER and ReadWriteOncePod
// SINGLE_NODE_SINGLE_WRITER; for any other driver both are
// SINGLE_NODE_WRITER.
//
// ReadWriteOncePod: a PV whose only access mode is ReadWriteOncePod is
// published for one pod on the node at a time, as upstream's mount
// operation enforces it (the scheduler does too, but a pod bound by
// nodeName or a static pod never meets it): another pod's SetUp fails
// with upstream's "MountVolume.SetUp failed for volume PV : volume uses
// the ReadWriteOncePod access mode and is already in use by another pod"
// (MapVolume.SetUpDevice for a raw block volume), retried with back-off
// until the first pod's volume is torn down. It is checked under the
// volume's lock, against the mount table (another pod's published
// target), so that pods set up at once or left by an earlier run count;
// upstream checks its actual state, where a mount of uncertain outcome
// counts as well. A volume stays staged while a pod on the node wants it
// (wanted.go: from its set-up to its tear-down, published or not, past
// the SELinux label check), as upstream keeps a device mounted while its
// desired state has a pod for it: the waiting pod then only publishes.
//
// fsGroup (appliesFSGroup, as upstream's supportsFSGroup): the node
// changes a volume's ownership to the pod's fsGroup unless the CSIDriver's
// fsGroupPolicy is None, the volume is read-only or the driver has
// VOLUME_MOUNT_GROUP (it is given the group instead); with File always,
// with ReadWriteOnceWithFSType (the default, and without a CSIDriver
// object) only for a volume with an fsType that is inline or whose PV
// lists ReadWriteOnce or ReadWriteOncePod.
//
// It does not watch the plugin directory (a plugin watcher does and calls
// Handler) and does not attach volumes itself (upstream's kubelet does
// with enableControllerAttachDetach false, which nodekit refuses). A
// block volume's stats are the driver's NodeGetVolumeStats at its published
// device file, as upstream's block mapper. Volume health (CSI v1.13's
// NodeGetVolumeHealth) is not asked for: kubelet v1.37 does not either.
package csi

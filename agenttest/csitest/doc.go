// Package csitest is a small CSI driver of the test kit, run as its own
// process (cmd/csitest-driver) over a unix socket, as a real node driver
// runs beside a kubelet.
//
// Server serves the CSI Identity and Node services (with the
// STAGE_UNSTAGE_VOLUME and GET_VOLUME_STATS capabilities): NodeStageVolume creates the volume's
// directory under the state dir (STATE/volumes/HANDLE) and bind-mounts it on
// the staging path; NodePublishVolume bind-mounts the staging path (or, for
// a volume published without staging, such as a CSI inline volume, its own
// directory) on the target path, read-only when asked; NodeUnpublishVolume
// and NodeUnstageVolume unmount; a block volume (a block capability) is
// the file STATE/volumes/HANDLE.img on a loop device (losetup) attached
// at stage and detached at unstage, bind-mounted on the publish target
// file; with -expand-volume (Options.ExpandVolume) the driver advertises
// EXPAND_VOLUME, logs each NodeExpandVolume to STATE/expand.log
// ("VOLUME PATH BYTES", Process.Expansions) and grows a block volume's
// file and loop device; NodeGetVolumeStats reports statfs of the path
// with the used bytes and inodes of the volume's tree (a block volume:
// its file's size as the total bytes). Every call is appended to STATE/calls.log
// ("RPC VOLUME PATH") and, after the time it came in, to
// STATE/calls_timed.log (Process.TimedCalls, for retry spacing), the secrets a stage or publish call carried to
// STATE/secrets.log ("RPC VOLUME K=V,..."), each publish's volume context
// to STATE/context.log (with volume_mount_group=G when given; with
// -volume-mount-group the driver advertises VOLUME_MOUNT_GROUP and chgrps
// the target), and a line "RPC CODE" in STATE/fail makes that RPC
// fail with that gRPC code (e.g. "NodePublishVolume Internal") until the
// line is removed; "RPC CODE VOLUME" fails that volume's calls only
// (Process.FailVolume), and "RPC CODE VOLUME N" its first N calls
// (Process.FailVolumeTimes). With a registry dir it also serves the kubelet
// plugin-registration API on REGISTRY/NAME-reg.sock, as node-driver-registrar
// does for a real driver.
//
// Each stage or publish that carried a publish context (a VolumeAttachment's
// attachmentMetadata) is logged to STATE/publish_context.log, and each
// one whose mount capability carried mount flags (an SELinux mount's
// context="LABEL") to STATE/mount_flags.log ("RPC VOLUME FLAG ...",
// Process.MountFlags). The driver applies none of them, unless started
// with -stage-tmpfs (Options.StageTmpfs): NodeStageVolume then mounts a
// tmpfs of the volume's own on the staging path with the flags as its
// options (a real context= mount on an SELinux host; publish bind-mounts
// it as before), and the content goes with the unstage. The access mode
// of each stage and publish is logged to STATE/access_mode.log ("RPC
// VOLUME MODE", Process.AccessModes); with -single-node-multi-writer
// (Options.SingleNodeMultiWriter) the driver advertises
// SINGLE_NODE_MULTI_WRITER, for which the agent sends the modes
// SINGLE_NODE_MULTI_WRITER and SINGLE_NODE_SINGLE_WRITER.
//
// Build and Start (start.go) build the command with `go build` and run it
// from tests; Calls, Secrets, PublishContexts and Fail read and write the
// files above. Attacher (attacher.go) plays the driver's csi-attacher
// sidecar in the test process: it marks the driver's VolumeAttachment
// objects attached with some attachmentMetadata, after a delay or failing
// on demand (status.attachError), and keeps the sidecar's finalizer on
// them until the attach/detach controller deletes them.
package csitest

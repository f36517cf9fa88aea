// Package pullrecords keeps kubelet's image pull records and decides, for
// an image already on the node, whether a pod may use it without pulling
// (KubeletEnsureSecretPulledImages, imagePullCredentialsVerificationPolicy,
// preloadedImagesVerificationAllowlist).
//
// Records live where kubelet v1.37 keeps them, in kubelet's file format, so
// a node taken over from kubelet keeps its records and the reverse:
// ROOT/image_manager/pulling holds one ImagePullIntent per image being
// pulled (written before the pull, removed after it), and
// ROOT/image_manager/pulled one ImagePulledRecord per image ID, mapping the
// image names it was pulled under to the credentials that pulled it (pull
// secrets by namespace, name, UID and a hash of the credentials; service
// accounts; or "any pod of the node" for anonymous and node-wide
// credentials). Files are named sha256-HEX of the image or image ID and
// written through a temporary file and a rename; a file that cannot be
// read or decoded is logged and treated as absent, as kubelet does.
//
// Write-through in-memory caches of kubelet's sizes (from maxPods and
// maxParallelImagePulls) sit in front of the files, so that a check of a
// present image reads no file while every record fits in them.
//
// The package does not pull, list images or read secrets: the image
// puller (criruntime) asks MustPull before using a present image and calls
// RecordIntent, then RecordPulled or RecordFailed, around each pull; image
// GC calls Prune after each pass with the images left, so the records of
// removed images go. RegisterMetrics registers kubelet's
// kubelet_imagemanager_* metrics on a registry the caller owns.
//
//	v, err := pullrecords.New(ctx, pullrecords.Config{RootDir: "/var/lib/kubelet",
//		Policy: "NeverVerifyPreloadedImages"})
//	must := v.MustPull(ctx, "registry.example/app:1", imageID, podCredentials)
package pullrecords

// Package volumemgr will own pod volumes: the desired and actual states of
// the world, the reconciler that mounts and unmounts to converge them, and
// the volume plugins (emptyDir, hostPath, configMap, secret, downwardAPI,
// projected) behind a small plugin interface.
//
// It does not create containers; workers wait on it before they do.
package volumemgr

// Package podutil holds the pod predicates every nodekit package asks the
// same way: is a pod static (from a file or URL), is it a mirror pod (the
// API server's copy of a static pod), is an init container a sidecar, and
// the two names a pod is keyed by. It owns no state and no policy; the
// packages that act on these answers (podconfig, syncloop, statusmgr,
// admission, cgroupmgr, the status generator) keep their own decisions.
//
//	if podutil.IsStatic(pod) {
//		mirror, ok := mirrors.GetMirrorPod(podutil.FullName(pod))
//		...
//	}
package podutil

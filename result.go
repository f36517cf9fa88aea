package nodekit

import (
	"errors"
	"fmt"
)

// Reason is an error whose text is the upstream reason word that ends up in a
// container's waiting or terminated reason. Runtimes wrap their failures so
// that errors.Is(err, ErrImagePull) tells an image problem from a create
// failure.
type Reason string

// Error returns the reason word.
func (r Reason) Error() string { return string(r) }

// The reasons a Runtime reports, with the spelling the pod status uses.
const (
	ErrImagePull             Reason = "ErrImagePull"
	ErrImagePullBackOff      Reason = "ImagePullBackOff"
	ErrImageInspect          Reason = "ImageInspectError"
	ErrImageNeverPull        Reason = "ErrImageNeverPull"
	ErrInvalidImageName      Reason = "InvalidImageName"
	ErrCreateContainerConfig Reason = "CreateContainerConfigError"
	ErrCreateContainer       Reason = "CreateContainerError"
	ErrRunContainer          Reason = "RunContainerError"
	ErrPostStartHook         Reason = "PostStartHookError"
	ErrKillContainer         Reason = "KillContainerError"
	ErrCrashLoopBackOff      Reason = "CrashLoopBackOff"
	ErrCreatePodSandbox      Reason = "CreatePodSandboxError"
	ErrConfigPodSandbox      Reason = "ConfigPodSandboxError"
	ErrKillPodSandbox        Reason = "KillPodSandboxError"
	// ErrRuntimeUnavailable means the runtime could not be reached at all.
	ErrRuntimeUnavailable Reason = "RuntimeUnavailable"
)

// Action names one step of SyncPod or KillPod.
type Action string

// The steps a Runtime reports.
const (
	ActionCreatePodSandbox Action = "CreatePodSandbox"
	ActionKillPodSandbox   Action = "KillPodSandbox"
	ActionStartContainer   Action = "StartContainer"
	ActionInitContainer    Action = "InitContainer"
	ActionKillContainer    Action = "KillContainer"
)

// ActionError is the failure of one step. Errors.Is matches both its Reason
// and its underlying error.
type ActionError struct {
	Action Action
	// Target is the container name, or the sandbox ID.
	Target string
	Reason Reason
	// Message is the human-readable part shown in the status.
	Message string
	// Image is the image a pull failure (ErrImagePull, ErrImageNeverPull,
	// ...) was about when it is not the container's own: an image volume's
	// reference. The caller's image-pull back-off is then kept for it.
	Image string
	Err   error
}

func (e *ActionError) Error() string {
	s := fmt.Sprintf("%s %q: %s", e.Action, e.Target, e.Reason)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil && (e.Message == "" || e.Message != e.Err.Error()) {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the reason and the underlying error.
func (e *ActionError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// ActionResult is one step SyncPod tried.
type ActionResult struct {
	Action Action
	Target string
	// Err is nil on success, else usually an *ActionError.
	Err error
}

// SyncResult lists the steps SyncPod tried, in order.
type SyncResult struct {
	Results []ActionResult
	// SandboxID and PodIPs describe the sandbox the containers run in.
	SandboxID string
	PodIPs    []string
}

// Add records one step.
func (r *SyncResult) Add(a Action, target string, err error) {
	r.Results = append(r.Results, ActionResult{Action: a, Target: target, Err: err})
}

// Err joins the failed steps' errors, or returns nil.
func (r *SyncResult) Err() error {
	var errs []error
	for _, a := range r.Results {
		if a.Err != nil {
			errs = append(errs, a.Err)
		}
	}
	return errors.Join(errs...)
}

// Failure returns the first failed step for the named container, or nil.
func (r *SyncResult) Failure(container string) *ActionError {
	for _, a := range r.Results {
		var ae *ActionError
		if a.Target == container && errors.As(a.Err, &ae) {
			return ae
		}
	}
	return nil
}

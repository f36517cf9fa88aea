package probes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// HookConfig wires a HookRunner. Everything is optional.
type HookConfig struct {
	// Execer runs exec hooks. Nil makes them fail.
	Execer Execer
	// Dialer opens the connections of httpGet hooks; nil means the same
	// default as the probes'.
	Dialer Dialer
	// Clock times sleep hooks. Nil means the real clock.
	Clock clock.Clock
	// Recorder receives the LifecycleHTTPFallback event. Nil drops it.
	Recorder EventRecorder
}

// HookRunner runs a container's postStart and preStop handlers: exec,
// httpGet and sleep, as upstream's lifecycle handler runner. It only runs
// them: killing a container whose postStart failed (FailedPostStartHook),
// recording FailedPostStartHook/FailedPreStopHook and bounding preStop by
// the grace period are the caller's. It is safe for concurrent use.
type HookRunner struct {
	exec      Execer
	clock     clock.Clock
	events    EventRecorder
	transport http.RoundTripper
}

// NewHookRunner returns a HookRunner.
func NewHookRunner(cfg HookConfig) *HookRunner {
	r := &HookRunner{exec: cfg.Execer, clock: cfg.Clock, events: cfg.Recorder}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.events == nil {
		r.events = discardEvents{}
	}
	var d Dialer = defaultDialer()
	if cfg.Dialer != nil {
		d = cfg.Dialer
	}
	tr := newTransport(d)
	// A hook is not bounded by a probe timeout: only by ctx.
	tr.TLSHandshakeTimeout = 0
	r.transport = tr
	return r
}

// Run runs handler h of container c (whose current ID is id) in pod. podIP
// is where an httpGet hook without a host goes. It blocks until the
// handler is done or ctx is done: the caller bounds preStop hooks by the
// grace period through ctx. On failure it returns a message in upstream's
// words, meant for logs (it may hold the command's output, so the
// FailedPostStartHook/FailedPreStopHook events should not carry it), and
// the error.
//
// An exec hook fails when the command cannot run or exits non-zero; an
// httpGet hook when the request cannot be sent or gets no response (as
// upstream, the status code does not matter; an HTTPS hook answered in
// plain HTTP is retried over HTTP, recording LifecycleHTTPFallback); a
// sleep hook when ctx ends first.
func (r *HookRunner) Run(ctx context.Context, pod *v1.Pod, c *v1.Container, id nodekit.ContainerID, podIP string, h *v1.LifecycleHandler) (string, error) {
	log := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "containerName", c.Name)
	switch {
	case h == nil:
		err := errors.New("invalid handler: nil")
		return "Cannot run handler: " + err.Error(), err
	case h.Exec != nil:
		err := r.runExec(ctx, id, h.Exec.Command)
		if err == nil {
			return "", nil
		}
		output := ""
		var he *hookExecError
		if errors.As(err, &he) {
			output = he.output
		}
		msg := fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, podDesc(pod), err, output)
		log.V(1).Info("Exec lifecycle hook failed", "execCommand", h.Exec.Command, "err", err)
		return msg, err
	case h.HTTPGet != nil:
		err := r.runHTTP(ctx, pod, c, podIP, h.HTTPGet)
		if err == nil {
			return "", nil
		}
		log.V(1).Info("HTTP lifecycle hook failed", "path", h.HTTPGet.Path, "err", err)
		return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, podDesc(pod), err), err
	case h.Sleep != nil:
		err := r.runSleep(ctx, h.Sleep.Seconds)
		if err == nil {
			return "", nil
		}
		log.V(1).Info("Sleep lifecycle hook failed", "sleepSeconds", h.Sleep.Seconds, "err", err)
		return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, podDesc(pod), err), err
	}
	err := fmt.Errorf("invalid handler: %v", h)
	log.Error(err, "Cannot run handler")
	return "Cannot run handler: " + err.Error(), err
}

// hookExecError is a hook command that ran and exited non-zero.
type hookExecError struct {
	cmd    []string
	code   int
	stderr []byte
	output string
}

func (e *hookExecError) Error() string {
	return fmt.Sprintf("command '%s' exited with %d: %s", strings.Join(e.cmd, " "), e.code, e.stderr)
}

// runExec runs cmd without a timeout of its own (ctx bounds it, as
// upstream's hooks have none).
func (r *HookRunner) runExec(ctx context.Context, id nodekit.ContainerID, cmd []string) error {
	if r.exec == nil {
		return errors.New("exec hooks need an Execer, and none is configured")
	}
	stdout, stderr, code, err := r.exec.ExecSync(ctx, id, cmd, 0)
	if err != nil {
		return err
	}
	if code != 0 {
		return &hookExecError{cmd: cmd, code: code, stderr: stderr, output: combined(stdout, stderr)}
	}
	return nil
}

func (r *HookRunner) runHTTP(ctx context.Context, pod *v1.Pod, c *v1.Container, podIP string, a *v1.HTTPGetAction) error {
	if a.Host == "" && podIP == "" {
		return errors.New("failed to find networking container: the pod has no IP")
	}
	req, err := newHTTPRequest(ctx, a, c, podIP, hookUserAgent)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: r.transport, CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req)
	drain(resp)
	if err == nil || !answeredInHTTP(err) {
		return err
	}
	// The server speaks plain HTTP on an HTTPS hook: retry in HTTP, without
	// credentials, as upstream.
	retry := req.Clone(ctx)
	retry.URL.Scheme = "http"
	retry.Header.Del("Authorization")
	resp, herr := client.Do(retry)
	drain(resp)
	if herr != nil {
		return err
	}
	r.events.Eventf(pod, v1.EventTypeWarning, ReasonLifecycleHTTPFallback,
		"request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", retry.URL.Host)
	return nil
}

func drain(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxOutput))
	_ = resp.Body.Close()
}

func answeredInHTTP(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) && strings.Contains(ue.Err.Error(), "server gave HTTP response to HTTPS client")
}

func (r *HookRunner) runSleep(ctx context.Context, seconds int64) error {
	if seconds <= 0 {
		return nil
	}
	t := r.clock.NewTimer(time.Duration(seconds) * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errors.New("container terminated before sleep hook finished")
	case <-t.C():
		return nil
	}
}

// podDesc is a pod as upstream names it in messages: name_namespace(uid).
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

package podconfig

import (
	"context"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// DefaultPeriod is how often the file source re-reads its directory and the
// HTTP source polls its URL, as upstream kubelet does.
const DefaultPeriod = 20 * time.Second

// ErrorHandler receives the problems a source meets and carries on after: an
// invalid manifest (a *ManifestError naming the file or URL and the field), an
// unreadable directory, an HTTP status other than 200, a failed list or watch.
// It is called from the source's Run goroutine and must not block for long.
type ErrorHandler func(ctx context.Context, err error)

// SourceOption adjusts NewAPISource, NewFileSource or NewHTTPSource. Each
// option says which sources it applies to; the others ignore it.
type SourceOption func(*sourceOptions)

type sourceOptions struct {
	period  time.Duration
	onError ErrorHandler
	header  http.Header
	name    string
}

func buildSourceOptions(defaultName string, opts []SourceOption) sourceOptions {
	o := sourceOptions{period: DefaultPeriod, name: defaultName}
	for _, opt := range opts {
		opt(&o)
	}
	if o.period <= 0 {
		o.period = DefaultPeriod
	}
	return o
}

// WithPeriod sets how often the file source re-reads its directory and the
// HTTP source polls its URL (default DefaultPeriod). A period <= 0 keeps the
// default.
func WithPeriod(d time.Duration) SourceOption {
	return func(o *sourceOptions) { o.period = d }
}

// WithErrorHandler makes every source report the problems it survives to h,
// in addition to its logger. Problems are reported when they appear or change,
// not again on every re-read while they persist.
func WithErrorHandler(h ErrorHandler) SourceOption {
	return func(o *sourceOptions) { o.onError = h }
}

// WithHeader adds h to every request of the HTTP source (upstream kubelet's
// --manifest-url-header).
func WithHeader(h http.Header) SourceOption {
	return func(o *sourceOptions) { o.header = h.Clone() }
}

// WithSourceName overrides the name a source reports (nodekit.SourceAPI,
// nodekit.SourceFile, nodekit.SourceHTTP by default), so that an agent can run
// two sources of one kind. The name ends up in kubernetes.io/config.source and,
// for file and HTTP sources, in the pods' UIDs.
func WithSourceName(name string) SourceOption {
	return func(o *sourceOptions) {
		if name != "" {
			o.name = name
		}
	}
}

// reporter remembers the last problem reported per key (a file path, a URL)
// so that a problem that persists across re-reads is reported once.
// It is safe for concurrent use.
type reporter struct {
	onError ErrorHandler
	mu      sync.Mutex
	last    map[string]string
}

func newReporter(h ErrorHandler) *reporter {
	return &reporter{onError: h, last: map[string]string{}}
}

// report logs err and hands it to the error handler, unless the same error
// was the last one reported for key.
func (r *reporter) report(ctx context.Context, key string, err error) {
	msg := err.Error()
	r.mu.Lock()
	repeated := r.last[key] == msg
	r.last[key] = msg
	r.mu.Unlock()
	if repeated {
		return
	}
	klog.FromContext(ctx).Error(err, "Pod source problem", "what", key)
	if r.onError != nil {
		r.onError(ctx, err)
	}
}

// clear forgets the problem of key, so that it is reported again if it comes
// back. It returns whether there was one.
func (r *reporter) clear(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, had := r.last[key]
	delete(r.last, key)
	return had
}

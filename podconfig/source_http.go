package podconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit"
)

// defaultHTTPTimeout bounds one poll when no client is given, as upstream.
const defaultHTTPTimeout = 10 * time.Second

// HTTPSource is a URL serving static pods as a pod source: the body is one
// v1 Pod or a v1 PodList, YAML or JSON. It is polled every period (20 s). A
// status other than 200, a transport error or an invalid body is reported
// and the last good set stays in force; an empty body means no pods (as
// upstream) and is reported too.
type HTTPSource struct {
	url      string
	nodeName string
	client   *http.Client
	clock    clock.Clock
	o        sourceOptions

	mu   sync.Mutex // guards the fields below
	body []byte     // last good body
	pods []*v1.Pod  // last good pods
	read bool       // a body has been read
}

var _ nodekit.Source = (*HTTPSource)(nil)

// NewHTTPSource returns a source of the static pods served at url, for node
// nodeName. client makes the requests (nil: a client with a 10 s timeout);
// clk drives the polling. Options: WithPeriod, WithErrorHandler, WithHeader,
// WithSourceName.
func NewHTTPSource(url, nodeName string, client *http.Client, clk clock.Clock, opts ...SourceOption) *HTTPSource {
	if client == nil {
		client = &http.Client{Timeout: defaultHTTPTimeout}
	}
	return &HTTPSource{
		url:      url,
		nodeName: nodeName,
		client:   client,
		clock:    clk,
		o:        buildSourceOptions(nodekit.SourceHTTP, opts),
	}
}

// Name implements nodekit.Source ("http" unless WithSourceName).
func (s *HTTPSource) Name() string { return s.o.name }

// Poll fetches the URL once. It returns the pods in force afterwards (copies
// the caller owns; the last good set if this poll failed, nil if no poll has
// succeeded yet) and the poll's problem. It blocks for one request (bounded
// by ctx and the client's timeout). It is the synchronous step of Run.
func (s *HTTPSource) Poll(ctx context.Context) ([]*v1.Pod, error) {
	err := s.poll(ctx)
	pods, _ := s.current()
	return pods, err
}

// Run implements nodekit.Source: it polls at once and then every period, and
// sends a SET after the first successful read and whenever the set changes.
func (s *HTTPSource) Run(ctx context.Context, out chan<- nodekit.PodUpdate) error {
	switch {
	case s.url == "":
		return errors.New("podconfig: http source: URL is empty")
	case s.nodeName == "":
		return errors.New("podconfig: http source: node name is empty")
	case s.clock == nil:
		return errors.New("podconfig: http source: clock is nil")
	}
	logger := klog.FromContext(ctx)
	rep := newReporter(s.o.onError)
	var sent []*v1.Pod // a copy of the last SET
	first := true
	// The timer is armed before each send, so a receiver that has the SET
	// knows the next poll is already scheduled.
	timer := s.clock.NewTimer(s.o.period)
	defer timer.Stop()
	for {
		if err := s.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.report(ctx, s.url, err)
		} else if rep.clear(s.url) {
			logger.Info("Reading pods from URL works again", "url", s.url)
		}
		if pods, ok := s.current(); ok && (first || !equality.Semantic.DeepEqual(pods, sent)) {
			keep := copyPods(pods)
			select {
			case out <- nodekit.PodUpdate{Op: nodekit.SET, Pods: pods, Source: s.Name()}:
				first, sent = false, keep
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
			timer.Reset(s.o.period)
		}
	}
}

// poll fetches and decodes the URL; on success the result becomes the set
// in force.
func (s *HTTPSource) poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return fmt.Errorf("manifest URL %s: %w", s.url, err)
	}
	for k, vs := range s.o.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("manifest URL: %w", err)
	}
	defer resp.Body.Close()
	data, err := readLimited(resp.Body, MaxManifestBytes)
	if err != nil {
		return fmt.Errorf("manifest URL %s: read body: %w", s.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("manifest URL %s: %s", s.url, resp.Status)
	}

	var pods []*v1.Pod
	if len(bytes.TrimSpace(data)) == 0 {
		err = fmt.Errorf("manifest URL %s: empty body, taken as no pods", s.url)
	} else {
		s.mu.Lock()
		unchanged := s.read && bytes.Equal(data, s.body)
		s.mu.Unlock()
		if unchanged {
			return nil
		}
		if pods, err = DecodeManifest(data, s.url); err != nil {
			return err
		}
		for _, pod := range pods {
			if err := makeStatic(pod, staticPodOptions{nodeName: s.nodeName, source: s.Name(), location: s.url}); err != nil {
				return err
			}
		}
	}
	s.mu.Lock()
	s.body, s.pods, s.read = data, pods, true
	s.mu.Unlock()
	return err
}

// current returns copies of the pods in force and whether any body has been
// read.
func (s *HTTPSource) current() ([]*v1.Pod, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.read {
		return nil, false
	}
	return copyPods(s.pods), true
}

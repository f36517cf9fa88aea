package statusmgr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodekit/nodekit/internal/clockwait"
	"github.com/nodekit/nodekit/kubeclient"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Defaults of HeartbeatConfig.
const (
	DefaultLeaseDurationSeconds = 40
	DefaultLeaseRenewInterval   = 10 * time.Second
)

// HeartbeatConfig configures a Heartbeat. Only NodeName is required.
type HeartbeatConfig struct {
	// NodeName names the Lease and is its holder identity.
	NodeName string
	// Namespace of the Lease. Default kube-node-lease.
	Namespace string
	// LeaseDurationSeconds is spec.leaseDurationSeconds: how long the node
	// stays healthy without a renewal. Default 40.
	LeaseDurationSeconds int32
	// RenewInterval is how often Run renews. Default 10s.
	RenewInterval time.Duration
	// Clock stamps renewTime and drives Run. Default: the real clock.
	Clock clock.Clock
}

// Heartbeat keeps the node's Lease (coordination.k8s.io/v1, in
// kube-node-lease, named after the node) renewed: the cheap signal the node
// lifecycle controller watches. It works with the node's own credentials.
// Safe for concurrent use (calls are serialized).
type Heartbeat struct {
	client kubeclient.Interface
	cfg    HeartbeatConfig

	mu sync.Mutex
	// latest is the Lease as last written, to renew without reading it.
	latest *coordinationv1.Lease
	// failedAt is when Renew last failed (Clock's UnixNano), 0 if never;
	// apart from mu, which a Renew holds while it waits on the API server.
	failedAt atomic.Int64
}

// NewHeartbeat returns a Heartbeat writing through client.
func NewHeartbeat(client kubeclient.Interface, cfg HeartbeatConfig) (*Heartbeat, error) {
	if cfg.NodeName == "" {
		return nil, fmt.Errorf("%w: HeartbeatConfig.NodeName: required", ErrInvalid)
	}
	if cfg.LeaseDurationSeconds < 0 || cfg.RenewInterval < 0 {
		return nil, fmt.Errorf("%w: HeartbeatConfig: LeaseDurationSeconds and RenewInterval must not be negative", ErrInvalid)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = v1.NamespaceNodeLease
	}
	if cfg.LeaseDurationSeconds == 0 {
		cfg.LeaseDurationSeconds = DefaultLeaseDurationSeconds
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = DefaultLeaseRenewInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Heartbeat{client: client, cfg: cfg}, nil
}

// Renew sets the Lease's renewTime to now, creating the Lease if it does not
// exist. It writes from the Lease it last wrote without reading it first,
// and falls back to reading it when that fails (someone else changed or
// deleted it). A new Lease gets an owner reference to the Node, so it goes
// away with the Node; it is not created while the Node cannot be read. One
// attempt (plus the fallback); it blocks on the API server.
func (h *Heartbeat) Renew(ctx context.Context) error {
	err := h.renew(ctx)
	if err != nil {
		h.failedAt.Store(h.cfg.Clock.Now().UnixNano())
	}
	return err
}

// FailedWithin reports whether a Renew failed in the last d: the API
// server was out of reach or refused the node not long ago.
func (h *Heartbeat) FailedWithin(d time.Duration) bool {
	at := h.failedAt.Load()
	return at != 0 && h.cfg.Clock.Since(time.Unix(0, at)) < d
}

// CacheDistrust is how long after a failed Lease renewal
// CachedUnlessFailing keeps reading the API server: above the longest
// wait of client-go's watch retries (30 s doubled by its jitter).
const CacheDistrust = 2 * time.Minute

// CachedUnlessFailing wraps cached for NodeConfig.Cached: it answers from
// cached unless hb's renewal failed within distrust, when it has no Node
// and the status sync GETs it. An outage the API server had is one the
// informer's watch had too, and the watch comes back on its own back-off,
// after the API server.
func CachedUnlessFailing(cached func() (*v1.Node, bool), hb *Heartbeat, distrust time.Duration) func() (*v1.Node, bool) {
	return func() (*v1.Node, bool) {
		if hb.FailedWithin(distrust) {
			return nil, false
		}
		return cached()
	}
}

func (h *Heartbeat) renew(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	leases := h.client.CoordinationV1().Leases(h.cfg.Namespace)
	var errs []error
	if h.latest != nil {
		lease, err := leases.Update(ctx, h.renewed(ctx, h.latest), metav1.UpdateOptions{})
		if err == nil {
			h.latest = lease
			return nil
		}
		h.latest = nil
		errs = append(errs, fmt.Errorf("renew lease %s/%s: %w", h.cfg.Namespace, h.cfg.NodeName, err))
	}
	cur, err := leases.Get(ctx, h.cfg.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		uid, err := nodeUID(ctx, h.client, h.cfg.NodeName)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("create lease %s/%s: get Node for the owner reference: %w", h.cfg.Namespace, h.cfg.NodeName, err))...)
		}
		fresh := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name:            h.cfg.NodeName,
			Namespace:       h.cfg.Namespace,
			OwnerReferences: []metav1.OwnerReference{nodeOwner(h.cfg.NodeName, uid)},
		}}
		lease, err := leases.Create(ctx, h.renewed(ctx, fresh), metav1.CreateOptions{})
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("create lease %s/%s: %w", h.cfg.Namespace, h.cfg.NodeName, err))...)
		}
		h.latest = lease
		return nil
	case err != nil:
		return errors.Join(append(errs, fmt.Errorf("get lease %s/%s: %w", h.cfg.Namespace, h.cfg.NodeName, err))...)
	}
	lease, err := leases.Update(ctx, h.renewed(ctx, cur), metav1.UpdateOptions{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("renew lease %s/%s: %w", h.cfg.Namespace, h.cfg.NodeName, err))...)
	}
	h.latest = lease
	return nil
}

// renewed returns a copy of base with holder, duration and renewTime set,
// and the Node owner reference added if it is missing and the Node can be
// read.
func (h *Heartbeat) renewed(ctx context.Context, base *coordinationv1.Lease) *coordinationv1.Lease {
	l := base.DeepCopy()
	holder, dur := h.cfg.NodeName, h.cfg.LeaseDurationSeconds
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &dur
	l.Spec.RenewTime = &metav1.MicroTime{Time: h.cfg.Clock.Now()}
	if len(l.OwnerReferences) == 0 {
		if uid, err := nodeUID(ctx, h.client, h.cfg.NodeName); err == nil {
			l.OwnerReferences = []metav1.OwnerReference{nodeOwner(h.cfg.NodeName, uid)}
		}
	}
	return l
}

func nodeOwner(name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: name, UID: uid}
}

// Run renews the Lease every RenewInterval until ctx is done, then returns
// ctx.Err(). A failed renewal is retried after 200ms, doubling up to 7s,
// until one succeeds; failures are logged with the logger from ctx.
func (h *Heartbeat) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var backoff time.Duration
	for {
		wait := h.cfg.RenewInterval
		if err := h.Renew(ctx); err != nil && ctx.Err() == nil {
			backoff = nextBackoff(backoff)
			wait = backoff
			logger.Error(err, "Node lease renewal failed; will retry", "node", h.cfg.NodeName, "retryIn", wait)
		} else {
			backoff = 0
		}
		if !clockwait.Sleep(ctx, h.cfg.Clock, wait) {
			return ctx.Err()
		}
	}
}

package volumemgr

import (
	"context"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/kubeclient"
)

// Watching is an ObjectGetter that watches each ConfigMap and Secret it
// is asked for, one object at a time (the Node authorizer lets a node
// watch exactly the objects its pods use), and answers later reads from
// that watch, as upstream's watch-based configMapAndSecretChangeDetection
// does: a node whose pods refresh their volumes every minute sends no
// requests for unchanged objects. A watch not read for Idle is stopped.
// A read before its watch has synced waits for the sync, for at most
// SyncWait (as upstream's one second), so a burst of pods reading one
// object sends one LIST instead of a GET each; a read still unsynced
// then, and a read of an object that does not exist, go to the API
// server (where upstream fails the read until the watch syncs).
type Watching struct {
	client kubeclient.Interface
	direct *Client
	clock  clock.WithTicker
	// Idle is how long a watched object may go unread before its watch
	// stops. Default 5 minutes.
	Idle time.Duration
	// SyncWait is how long a read waits for its watch's first list
	// before it asks the API server. Default 1 second.
	SyncWait time.Duration

	mu      sync.Mutex
	watches map[watchKey]*objectWatch
}

type watchKey struct {
	secret          bool
	namespace, name string
}

type objectWatch struct {
	store    cache.Store
	synced   cache.DoneChecker
	stop     chan struct{}
	lastRead time.Time
}

// NewWatching returns a watching getter over cs; Run stops idle watches.
func NewWatching(cs kubeclient.Interface, clk clock.WithTicker) *Watching {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Watching{client: cs, direct: FromClient(cs), clock: clk, Idle: 5 * time.Minute, SyncWait: time.Second, watches: map[watchKey]*objectWatch{}}
}

// GetConfigMap implements ObjectGetter.
func (w *Watching) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	if obj, ok := w.cached(ctx, watchKey{false, namespace, name}); ok {
		return obj.(*v1.ConfigMap).DeepCopy(), nil
	}
	return w.direct.GetConfigMap(ctx, namespace, name)
}

// GetSecret implements ObjectGetter.
func (w *Watching) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	if obj, ok := w.cached(ctx, watchKey{true, namespace, name}); ok {
		return obj.(*v1.Secret).DeepCopy(), nil
	}
	return w.direct.GetSecret(ctx, namespace, name)
}

// CreateToken implements TokenRequester (never cached).
func (w *Watching) CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return w.direct.CreateToken(ctx, namespace, serviceAccount, req)
}

// cached returns the watched object, starting its watch on first use and
// waiting for its sync.
func (w *Watching) cached(ctx context.Context, k watchKey) (runtime.Object, bool) {
	w.mu.Lock()
	ow := w.watches[k]
	if ow == nil {
		ow = w.start(k)
		w.watches[k] = ow
	}
	ow.lastRead = w.clock.Now()
	w.mu.Unlock()
	if !w.waitSynced(ctx, ow) {
		return nil, false
	}
	obj, ok, err := ow.store.GetByKey(k.namespace + "/" + k.name)
	if err != nil || !ok {
		return nil, false // not there (yet): the API server says why
	}
	return obj.(runtime.Object), true
}

// waitSynced waits at most SyncWait for the watch's first list.
func (w *Watching) waitSynced(ctx context.Context, ow *objectWatch) bool {
	select {
	case <-ow.synced.Done():
		return true
	default:
	}
	select {
	case <-ow.synced.Done():
		return true
	case <-w.clock.After(w.SyncWait):
	case <-ctx.Done():
	case <-ow.stop: // stopped idle meanwhile
	}
	return false
}

// start runs a reflector on the one object.
func (w *Watching) start(k watchKey) *objectWatch {
	sel := fields.OneTermEqualSelector("metadata.name", k.name).String()
	var lw *cache.ListWatch
	var example runtime.Object
	if k.secret {
		example = &v1.Secret{}
		c := w.client.CoreV1().Secrets(k.namespace)
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return c.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return c.Watch(ctx, o)
			},
		}
	} else {
		example = &v1.ConfigMap{}
		c := w.client.CoreV1().ConfigMaps(k.namespace)
		lw = &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = sel
				return c.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = sel
				return c.Watch(ctx, o)
			},
		}
	}
	inf := cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{})
	ow := &objectWatch{store: inf.GetStore(), synced: inf.HasSyncedChecker(), stop: make(chan struct{})}
	go inf.Run(ow.stop)
	return ow
}

// Run stops the watches not read for Idle, every minute, until ctx is
// done; then it stops them all.
func (w *Watching) Run(ctx context.Context) error {
	t := w.clock.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			for k, ow := range w.watches {
				close(ow.stop)
				delete(w.watches, k)
			}
			w.mu.Unlock()
			return ctx.Err()
		case <-t.C():
			w.StopIdle()
		}
	}
}

// StopIdle stops the watches not read for Idle.
func (w *Watching) StopIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ow := range w.watches {
		if w.clock.Since(ow.lastRead) >= w.Idle {
			close(ow.stop)
			delete(w.watches, k)
		}
	}
}

// Watched is how many objects are watched now.
func (w *Watching) Watched() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

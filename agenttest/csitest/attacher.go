package csitest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// PublishContextLogFile has a line "RPC VOLUME K=V,..." for each
// NodeStageVolume and NodePublishVolume that carried a publish context
// (the VolumeAttachment's attachmentMetadata, passed on by the node).
const PublishContextLogFile = "publish_context.log"

// PublishContexts returns the lines of PublishContextLogFile, in order.
func (p *Process) PublishContexts() ([]string, error) { return p.lines(PublishContextLogFile) }

// AttacherConfig configures an Attacher.
type AttacherConfig struct {
	// Driver is the CSI driver name whose VolumeAttachments it handles
	// (spec.attacher). Required.
	Driver string
	// Metadata is the status.attachmentMetadata of an attached volume
	// (the publish context the node passes to NodeStage/NodePublish).
	Metadata map[string]string
	// Delay is how long after first seeing a VolumeAttachment it marks it
	// attached (or failed).
	Delay time.Duration
	// Period is how often it lists the VolumeAttachments; default 100ms.
	Period time.Duration
	// Clock times Delay and Period; nil means the real clock.
	Clock clock.WithTicker
}

// Attacher plays the csi-attacher sidecar of a driver whose CSIDriver says
// attachRequired, in the test process: it lists the VolumeAttachment
// objects of its driver every Period; to a new one it adds the finalizer
// external-attacher/DRIVER (as the sidecar does) and, Delay later, sets
// status.attached with Metadata, or status.attachError while Fail is in
// force; to one being deleted (the attach/detach controller detaching) it
// removes its finalizer, so that the object goes. It calls no driver RPC
// (the test driver has no controller service): attaching is bookkeeping.
type Attacher struct {
	cfg    AttacherConfig
	client kubernetes.Interface

	mu       sync.Mutex
	seen     map[string]time.Time
	failMsg  string
	attached []string
	detached []string
}

// NewAttacher returns an Attacher over client; Run runs it.
func NewAttacher(client kubernetes.Interface, cfg AttacherConfig) (*Attacher, error) {
	if cfg.Driver == "" {
		return nil, fmt.Errorf("csitest: AttacherConfig.Driver is required")
	}
	if cfg.Period <= 0 {
		cfg.Period = 100 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Attacher{cfg: cfg, client: client, seen: map[string]time.Time{}}, nil
}

// StartAttacher runs an Attacher in a goroutine until the test ends.
func StartAttacher(t testing.TB, client kubernetes.Interface, cfg AttacherConfig) *Attacher {
	t.Helper()
	a, err := NewAttacher(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// Finalizer is the finalizer the attacher keeps on its VolumeAttachments,
// as the csi-attacher sidecar's (external-attacher/DRIVER, "/" as "-").
func (a *Attacher) Finalizer() string {
	return "external-attacher/" + strings.ReplaceAll(a.cfg.Driver, "/", "-")
}

// Fail makes attachments fail with msg (status.attachError) until
// Recover.
func (a *Attacher) Fail(msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failMsg = msg
}

// Recover ends Fail.
func (a *Attacher) Recover() { a.Fail("") }

// Attached and Detached return the names of the VolumeAttachments it
// marked attached and whose finalizer it removed, in order.
func (a *Attacher) Attached() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.attached)
}

// Detached: see Attached.
func (a *Attacher) Detached() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.detached)
}

// Run handles the VolumeAttachments every Period until ctx is done, then
// returns ctx.Err(). API errors are logged and retried.
func (a *Attacher) Run(ctx context.Context) error {
	t := a.cfg.Clock.NewTicker(a.cfg.Period)
	defer t.Stop()
	for {
		if err := a.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("csitest attacher: will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
	}
}

// SyncOnce is one pass over the VolumeAttachments.
func (a *Attacher) SyncOnce(ctx context.Context) error {
	list, err := a.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		va := &list.Items[i]
		if va.Spec.Attacher != a.cfg.Driver {
			continue
		}
		if err := a.sync(ctx, va); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("VolumeAttachment %s: %w", va.Name, err)
		}
	}
	return nil
}

func (a *Attacher) sync(ctx context.Context, va *storagev1.VolumeAttachment) error {
	vas := a.client.StorageV1().VolumeAttachments()
	fin := a.Finalizer()
	if va.DeletionTimestamp != nil {
		if !slices.Contains(va.Finalizers, fin) {
			return nil
		}
		va = va.DeepCopy()
		va.Finalizers = slices.DeleteFunc(va.Finalizers, func(f string) bool { return f == fin })
		if _, err := vas.Update(ctx, va, metav1.UpdateOptions{}); err != nil {
			return err
		}
		a.record(&a.detached, va.Name)
		return nil
	}
	if va.Status.Attached {
		return nil
	}
	if !slices.Contains(va.Finalizers, fin) {
		va = va.DeepCopy()
		va.Finalizers = append(va.Finalizers, fin)
		updated, err := vas.Update(ctx, va, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		va = updated
	}
	now := a.cfg.Clock.Now()
	a.mu.Lock()
	first, ok := a.seen[va.Name]
	if !ok {
		first = now
		a.seen[va.Name] = now
	}
	failMsg := a.failMsg
	a.mu.Unlock()
	if now.Sub(first) < a.cfg.Delay {
		return nil
	}
	va = va.DeepCopy()
	if failMsg != "" {
		if va.Status.AttachError != nil && va.Status.AttachError.Message == failMsg {
			return nil
		}
		va.Status.AttachError = &storagev1.VolumeError{Time: metav1.NewTime(now), Message: failMsg}
		_, err := vas.UpdateStatus(ctx, va, metav1.UpdateOptions{})
		return err
	}
	va.Status.Attached, va.Status.AttachError = true, nil
	va.Status.AttachmentMetadata = maps.Clone(a.cfg.Metadata)
	if _, err := vas.UpdateStatus(ctx, va, metav1.UpdateOptions{}); err != nil {
		return err
	}
	a.record(&a.attached, va.Name)
	return nil
}

func (a *Attacher) record(list *[]string, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	*list = append(*list, name)
	delete(a.seen, name)
}

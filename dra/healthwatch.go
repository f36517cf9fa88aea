package dra

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
)

// The device health services nodekit reads, newest first, as upstream
// kubelet v1.37. A driver lists them beside its DRA service in the
// registration's supported versions; the service is optional.
var healthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

// healthRetry is how long the watcher waits before opening a health
// stream again after it failed or ended, as upstream.
const healthRetry = 5 * time.Second

// pickHealthService returns the newest health service of versions nodekit
// reads, "" when the driver offers none.
func pickHealthService(versions []string) string {
	for _, s := range healthServices {
		if slices.Contains(versions, s) {
			return s
		}
	}
	return ""
}

// watchHealth follows the health stream of driver endpoint d until ctx is
// done (deregistration, Run's end), opening it again healthRetry after it
// ended. A driver answering Unimplemented does not report health: the
// watch stops, as upstream (a driver that gains it registers again).
func (m *Manager) watchHealth(ctx context.Context, d *driver, service string) {
	logger := klog.FromContext(ctx).WithValues("driverName", d.name, "endpoint", d.endpoint, "healthService", service)
	for {
		err := m.followHealth(ctx, d, service)
		gone, cerr := m.health.clear(d.name)
		if cerr != nil {
			logger.Error(cerr, "Unable to checkpoint DRA device health; a restart may show stale health until the driver reports")
		}
		m.notifyPods(ctx, d.name, gone)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			logger.V(2).Info("DRA driver does not report device health; not watching it", "err", err)
			return
		}
		logger.V(3).Info("DRA device health stream ended, will retry", "err", err, "after", healthRetry)
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(healthRetry):
		}
	}
}

// followHealth opens one health stream and records its reports until it
// ends; io.EOF (the driver closed it) is nil.
func (m *Manager) followHealth(ctx context.Context, d *driver, service string) error {
	var stream grpc.ServerStreamingClient[drahealthv1.NodeWatchResourcesResponse]
	var err error
	if service == drahealthv1alpha1.DRAResourceHealthService {
		client := drahealthv1.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(d.conn)}
		stream, err = client.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	} else {
		stream, err = drahealthv1.NewDRAResourceHealthClient(d.conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	}
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Watching DRA device health", "driverName", d.name, "endpoint", d.endpoint)
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		m.recordHealth(ctx, d.name, resp.GetDevices())
	}
}

// recordHealth stores one report and wakes the pods whose devices changed.
func (m *Manager) recordHealth(ctx context.Context, driver string, report []*drahealthv1.DeviceHealth) {
	changed, dropped, err := m.health.update(driver, report)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to checkpoint DRA device health; a restart may lose it", "driverName", driver)
	}
	if dropped > 0 {
		klog.FromContext(ctx).Error(nil, "DRA health report holds more devices than nodekit keeps per driver; new devices beyond the limit ignored",
			"driverName", driver, "limit", maxHealthDevices, "ignored", dropped)
	}
	m.notifyPods(ctx, driver, changed)
}

// notifyPods sends the pods holding one of devices of driver on
// HealthUpdates. A full channel drops the notice, logged, as upstream:
// the pod's next sync shows the health anyway.
func (m *Manager) notifyPods(ctx context.Context, driver string, devices []healthKey) {
	if len(devices) == 0 {
		return
	}
	want := map[healthKey]bool{}
	for _, k := range devices {
		want[k] = true
	}
	pods := map[string]bool{}
	m.mu.Lock()
	for _, c := range m.claims {
		for _, dev := range c.DriverState[driver].Devices {
			if want[healthKey{dev.PoolName, dev.DeviceName}] {
				for uid := range c.PodUIDs {
					pods[uid] = true
				}
			}
		}
	}
	m.mu.Unlock()
	for uid := range pods {
		select {
		case m.healthUpdates <- types.UID(uid):
		default:
			klog.FromContext(ctx).Error(nil, "DRA health update channel is full, discarding a pod's notice", "podUID", uid)
		}
	}
}

// HealthUpdates carries the UIDs of pods a device health change concerns
// (Config.ReportHealth), so the agent publishes their status again.
func (m *Manager) HealthUpdates() <-chan types.UID { return m.healthUpdates }

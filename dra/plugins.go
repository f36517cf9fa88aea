package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	"k8s.io/utils/clock"
)

// The gRPC services nodekit speaks to a driver, newest first, as upstream
// kubelet v1.37 (v1.DRAPlugin, then v1beta1.DRAPlugin through the
// conversion wrapper of k8s.io/kubelet).
var supportedServices = []string{drapb.DRAPluginService, drapbv1beta1.DRAPluginService}

// callTimeout bounds each call to a driver, as upstream's default.
const callTimeout = 45 * time.Second

// driver is one registered endpoint of a DRA driver.
type driver struct {
	name, endpoint string
	conn           *grpc.ClientConn
	client         drapb.DRAPluginClient
	// stopHealth ends the endpoint's health watch; nil without one.
	stopHealth context.CancelFunc
}

// pickService returns the newest service of versions nodekit speaks.
func pickService(name, endpoint string, versions []string) (string, error) {
	if len(versions) == 0 {
		return "", fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: empty list of supported gRPC services (aka supported versions)", name, endpoint)
	}
	for _, s := range versions {
		if slices.Contains(supportedServices, s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: none of services supported by the plugin (%q) are supported by the kubelet (%q)", name, endpoint, versions, supportedServices)
}

// ValidatePlugin accepts a driver that speaks a service nodekit speaks
// (the plugin watcher calls it before RegisterPlugin). It does not block.
func (m *Manager) ValidatePlugin(_ context.Context, name, endpoint string, versions []string) error {
	_, err := pickService(name, endpoint, versions)
	return err
}

// RegisterPlugin connects to the driver name at the unix socket endpoint
// and uses it for that driver's claims; the newest registration wins. It
// cancels a pending ResourceSlice cleanup of the driver. The connection is
// lazy: RegisterPlugin does not block on the driver.
func (m *Manager) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error {
	service, err := pickService(name, endpoint, versions)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix:"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to DRA driver %s at endpoint %s: %w", name, endpoint, err)
	}
	client := drapb.NewDRAPluginClient(conn)
	if service == drapbv1beta1.DRAPluginService {
		client = drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(conn)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.drivers[name] {
		if d.endpoint == endpoint {
			conn.Close()
			return fmt.Errorf("endpoint %s already registered for DRA driver plugin %s", endpoint, name)
		}
	}
	d := &driver{name: name, endpoint: endpoint, conn: conn, client: client}
	m.drivers[name] = append(m.drivers[name], d)
	if t := m.wipes[name]; t != nil {
		t.Stop()
		delete(m.wipes, name)
	}
	health := pickHealthService(versions)
	if m.cfg.ReportHealth && health != "" {
		// The watch outlives this call: it ends on deregistration or
		// when Run returns, not with the caller's context.
		hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		d.stopHealth = cancel
		m.watches.Go(func() { m.watchHealth(hctx, d, health) })
	}
	klog.FromContext(ctx).V(2).Info("Registered DRA driver", "driverName", name, "endpoint", endpoint, "service", service, "healthService", health)
	return nil
}

// DeRegisterPlugin forgets the endpoint of driver name. When it was the
// driver's last one, the driver's ResourceSlices of this node are deleted
// after Config.WipeDelay unless the driver registers again, as upstream:
// a driver restarting for an upgrade keeps its slices, a removed one does
// not leave devices the scheduler would allocate.
func (m *Manager) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.drivers[name]
	i := slices.IndexFunc(list, func(d *driver) bool { return d.endpoint == endpoint })
	if i < 0 {
		return
	}
	list[i].close()
	list = slices.Delete(list, i, i+1)
	if len(list) > 0 {
		m.drivers[name] = list
		return
	}
	delete(m.drivers, name)
	klog.FromContext(ctx).V(2).Info("Unregistered DRA driver", "driverName", name, "endpoint", endpoint, "wipeSlicesAfter", m.cfg.WipeDelay)
	if m.cfg.Slices == nil || m.wipes[name] != nil {
		return
	}
	m.wipes[name] = m.cfg.Clock.AfterFunc(m.cfg.WipeDelay, func() {
		select {
		case m.wipeCh <- name:
		default:
			// Run is not listening (not started or busy): keep the
			// request for its next pass.
			m.mu.Lock()
			m.wipeLater = append(m.wipeLater, name)
			m.mu.Unlock()
		}
	})
}

// close ends the endpoint's health watch and its connection.
func (d *driver) close() {
	if d.stopHealth != nil {
		d.stopHealth()
	}
	_ = d.conn.Close()
}

// client returns the client of driver name's newest endpoint.
func (m *Manager) client(name string) (drapb.DRAPluginClient, error) {
	if name == "" {
		return nil, errors.New("DRA driver name is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.drivers[name]
	if len(list) == 0 {
		return nil, fmt.Errorf("DRA driver %s is not registered", name)
	}
	return list[len(list)-1].client, nil
}

// wipe deletes driver's ResourceSlices of this node ("" is every driver),
// unless the driver registered again meanwhile.
func (m *Manager) wipe(ctx context.Context, name string) {
	m.mu.Lock()
	delete(m.wipes, name)
	registered := name != "" && len(m.drivers[name]) > 0
	m.mu.Unlock()
	if registered || m.cfg.Slices == nil {
		return
	}
	if err := m.cfg.Slices.DeleteResourceSlices(ctx, name); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to delete the ResourceSlices of a DRA driver", "driverName", name)
		return
	}
	klog.FromContext(ctx).V(3).Info("Deleted ResourceSlices", "driverName", name)
}

// closeDrivers closes every driver connection and waits for the health
// watches to end.
func (m *Manager) closeDrivers() {
	defer m.watches.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, list := range m.drivers {
		for _, d := range list {
			d.close()
		}
		delete(m.drivers, name)
	}
	for name, t := range m.wipes {
		t.Stop()
		delete(m.wipes, name)
	}
}

var _ clock.WithDelayedExecution = clock.RealClock{}

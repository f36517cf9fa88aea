package csi

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// operationBuckets are upstream's buckets of both histograms.
var operationBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600}

// Metrics are the CSI plugin's series, as upstream's volume util metrics:
// csi_operations_seconds, every gRPC call to a driver by method and status
// code, and storage_operation_duration_seconds, the plugin's mount and
// unmount operations. RegisterMetrics makes them; PluginConfig.Metrics
// and HandlerConfig.Metrics take them (nil: not observed).
type Metrics struct {
	clock      clock.PassiveClock
	operations *prometheus.HistogramVec
	storage    *prometheus.HistogramVec
}

// RegisterMetrics creates the metrics and registers them with reg; clk
// times the operations (nil: the real clock). It fails if one is already
// registered there.
func RegisterMetrics(reg prometheus.Registerer, clk clock.PassiveClock) (*Metrics, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Metrics{clock: clk,
		operations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "csi", Name: "operations_seconds", Buckets: operationBuckets,
			Help: "[ALPHA] Container Storage Interface operation duration with gRPC error code status total",
		}, []string{"driver_name", "method_name", "grpc_status_code", "migrated"}),
		storage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "storage_operation_duration_seconds", Buckets: operationBuckets,
			Help: "[BETA] Storage operation duration",
		}, []string{"volume_plugin", "operation_name", "status", "migrated"}),
	}
	for _, c := range []prometheus.Collector{m.operations, m.storage} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// interceptor observes each driver call of driver in csi_operations_seconds.
func (m *Metrics) interceptor(driver string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := m.clock.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.operations.WithLabelValues(driver, method, grpcCode(err), "false").Observe(m.clock.Since(start).Seconds())
		return err
	}
}

// grpcCode is the status code of a call's error, as upstream labels it:
// "unknown-non-grpc" when the call failed before reaching gRPC.
func grpcCode(err error) string {
	if err == nil {
		return "OK"
	}
	st, ok := status.FromError(err)
	if !ok {
		return "unknown-non-grpc"
	}
	return st.Code().String()
}

// operation starts timing one of the plugin's storage operations on a
// volume of driver; the returned func records its outcome.
func (m *Metrics) operation(driver, name string) func(err *error) {
	if m == nil {
		return func(*error) {}
	}
	start := m.clock.Now()
	return func(err *error) {
		result := "success"
		if *err != nil {
			result = "fail-unknown" // upstream's only failure status
		}
		m.storage.WithLabelValues(PluginName+":"+driver, name, result, "false").Observe(m.clock.Since(start).Seconds())
	}
}

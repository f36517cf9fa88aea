package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"k8s.io/component-base/tracing"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	"k8s.io/klog/v2"
)

// newTracerProvider is kubelet's tracer provider for the tracing block
// (KubeletTracing, GA): an OTLP gRPC exporter to tracing.endpoint
// (localhost:4317 when unset; insecure, as upstream), sampling
// samplingRatePerMillion of the traces that start here (none when
// unset) and following a sampled parent, with the resource kubelet
// gives (service.name kubelet, host.name). Nil, with no error, when
// the block is unset: nothing is traced then and no interceptor or
// exporter is made (kubelet installs a no-op provider instead).
func newTracerProvider(ctx context.Context, c *tracingapi.TracingConfiguration, hostname string) (tracing.TracerProvider, error) {
	if c == nil {
		return nil, nil
	}
	res := []resource.Option{resource.WithAttributes(
		attribute.String("service.name", "kubelet"),
		attribute.String("host.name", hostname),
	)}
	tp, err := tracing.NewProvider(ctx, c, nil, res)
	if err != nil {
		return nil, fmt.Errorf("tracing: could not configure tracer provider: %w", err)
	}
	return tp, nil
}

// stopTracing flushes the spans not yet exported and closes the
// exporter, waiting 5s at most (ctx may be done already: the agent is
// stopping).
func (a *agent) stopTracing(ctx context.Context) {
	if a == nil || a.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.tracer.Shutdown(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to flush the spans to the tracing endpoint")
	}
}

package criruntime

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// versionOnly and imageFsOnly are a CRI runtime and image service on a
// unix socket that answer what New asks (Version, ImageFsInfo) and
// nothing else.
type versionOnly struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (versionOnly) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.0", RuntimeApiVersion: "v1"}, nil
}

type imageFsOnly struct {
	runtimeapi.UnimplementedImageServiceServer
}

func (imageFsOnly) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func serveVersionOnly(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, versionOnly{})
	runtimeapi.RegisterImageServiceServer(srv, imageFsOnly{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

// TestTracerProvider: with Config.TracerProvider each CRI call is a client
// span, a child of the caller's span; without, none is recorded.
func TestTracerProvider(t *testing.T) {
	endpoint := serveVersionOnly(t)
	for _, traced := range []bool{true, false} {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		cfg := Config{Endpoint: endpoint}
		if traced {
			cfg.TracerProvider = tp
		}
		ctx, parent := tp.Tracer("test").Start(t.Context(), "parent")
		r, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Version(ctx); err != nil {
			t.Fatal(err)
		}
		parent.End()
		_ = r.Close(t.Context())
		var versions int
		for _, s := range spans.Ended() {
			if s.Name() != "runtime.v1.RuntimeService/Version" {
				continue
			}
			versions++
			if s.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("Version span's parent is %v, want the caller's span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
			}
		}
		switch {
		case traced && versions < 2: // New's check and the call above
			t.Errorf("traced: %d runtime.v1.RuntimeService/Version spans, want 2 or more; spans: %d", versions, len(spans.Ended()))
		case !traced && len(spans.Ended()) != 1: // the test's own parent only
			t.Errorf("untraced: %d spans recorded, want the test's own only", len(spans.Ended()))
		}
	}
}

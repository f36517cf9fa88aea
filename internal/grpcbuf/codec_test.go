package grpcbuf

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protov2 "google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recordingPool hands out exact-size buffers and records what it was asked.
type recordingPool struct {
	gets []int
	puts int
}

func (p *recordingPool) Get(n int) *[]byte {
	p.gets = append(p.gets, n)
	b := make([]byte, n)
	return &b
}

func (p *recordingPool) Put(*[]byte) { p.puts++ }

// listOf is a ListContainersResponse of n containers, about 200 B each.
func listOf(n int) *runtimeapi.ListContainersResponse {
	r := &runtimeapi.ListContainersResponse{}
	for i := range n {
		r.Containers = append(r.Containers, &runtimeapi.Container{
			Id:           fmt.Sprintf("%064d", i),
			PodSandboxId: fmt.Sprintf("%064d", i+1),
			Metadata:     &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c-%d", i)},
			Image:        &runtimeapi.ImageSpec{Image: "busybox"},
			State:        runtimeapi.ContainerState_CONTAINER_RUNNING,
		})
	}
	return r
}

// frames splits b into buffers of at most 16 KiB, as gRPC's transport
// delivers a message of several HTTP/2 data frames.
func frames(b []byte) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16<<10)
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return out
}

func TestUnmarshalGathersFramesIntoTheCodecsPool(t *testing.T) {
	want := listOf(400)
	wire, err := protov2.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	data := frames(wire)
	if len(data) < 2 {
		t.Fatalf("test message is %d bytes, one frame", len(wire))
	}
	pool := &recordingPool{}
	c, err := NewCodec(pool)
	if err != nil {
		t.Fatal(err)
	}
	got := &runtimeapi.ListContainersResponse{}
	if err := c.Unmarshal(data, got); err != nil {
		t.Fatal(err)
	}
	if !protov2.Equal(got, want) {
		t.Fatalf("decoded message differs from the one sent")
	}
	if len(pool.gets) != 1 || pool.gets[0] != len(wire) || pool.puts != 1 {
		t.Fatalf("pool: gets %v, puts %d; want one get of %d bytes, returned", pool.gets, pool.puts, len(wire))
	}
}

func TestUnmarshalTakesOneFrameAsItIs(t *testing.T) {
	want := listOf(3)
	wire, err := protov2.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	pool := &recordingPool{}
	c, err := NewCodec(pool)
	if err != nil {
		t.Fatal(err)
	}
	got := &runtimeapi.ListContainersResponse{}
	if err := c.Unmarshal(frames(wire), got); err != nil {
		t.Fatal(err)
	}
	if !protov2.Equal(got, want) || len(pool.gets) != 0 {
		t.Fatalf("equal %v, pool gets %v; want the message, no copy", protov2.Equal(got, want), pool.gets)
	}
}

// TestDefaultPoolTiers checks the package's sizes: a 70 KiB message takes
// a 128 KiB buffer from the codec's pool, where gRPC's default pool gives
// 1 MiB.
func TestDefaultPoolTiers(t *testing.T) {
	c, err := NewCodec(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := c.pool.Get(70 << 10)
	defer c.pool.Put(b)
	if got := cap(*b); got != 128<<10 {
		t.Fatalf("codec pool: 70 KiB in a buffer of %d bytes, want %d", got, 128<<10)
	}
	d := mem.DefaultBufferPool().Get(70 << 10)
	defer mem.DefaultBufferPool().Put(d)
	if got := cap(*d); got != 1<<20 {
		t.Fatalf("gRPC's default pool changed: 70 KiB in %d bytes (this package's reason is gone?)", got)
	}
}

func TestRegisterReplacesTheProtoCodec(t *testing.T) {
	if err := Register(); err != nil {
		t.Fatal(err)
	}
	if _, ok := encoding.GetCodecV2(proto.Name).(*Codec); !ok {
		t.Fatalf("registered proto codec is %T", encoding.GetCodecV2(proto.Name))
	}
	first := encoding.GetCodecV2(proto.Name).(*Codec)
	if err := Register(); err != nil {
		t.Fatal(err)
	}
	if again := encoding.GetCodecV2(proto.Name).(*Codec); again.base != first.base {
		t.Fatalf("a second Register wrapped the first codec instead of gRPC's")
	}
}

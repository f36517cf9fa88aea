package grpcbuf

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// sizeExponents are the pool's tiers: 2^8 B to 2^20 B, every power of two.
var sizeExponents = []uint8{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}

// Codec is gRPC's proto codec whose received multi-frame messages are
// gathered into a buffer of Pool's instead of the default pool's.
type Codec struct {
	base encoding.CodecV2
	pool mem.BufferPool
}

// NewCodec wraps gRPC's registered proto codec; pool nil is the
// power-of-two pool of the package doc.
func NewCodec(pool mem.BufferPool) (*Codec, error) {
	base := encoding.GetCodecV2(proto.Name)
	if base == nil {
		return nil, fmt.Errorf("grpcbuf: no %q codec registered", proto.Name)
	}
	if own, ok := base.(*Codec); ok { // registered before: wrap gRPC's, once
		base = own.base
	}
	if pool == nil {
		var err error
		if pool, err = mem.NewBinaryTieredBufferPool(sizeExponents...); err != nil {
			return nil, fmt.Errorf("grpcbuf: buffer pool: %w", err)
		}
	}
	return &Codec{base: base, pool: pool}, nil
}

// Register makes a Codec the process's proto codec.
func Register() error {
	c, err := NewCodec(nil)
	if err != nil {
		return err
	}
	encoding.RegisterCodecV2(c)
	return nil
}

// Name is the proto codec's name, so Codec replaces it.
func (c *Codec) Name() string { return c.base.Name() }

// Marshal is the proto codec's.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal gathers a message of several buffers into one of the pool's,
// then decodes it as the proto codec does (which takes a single buffer as
// it is).
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if len(data) > 1 {
		buf := data.MaterializeToBuffer(c.pool)
		defer buf.Free()
		data = mem.BufferSlice{buf}
	}
	return c.base.Unmarshal(data, v)
}

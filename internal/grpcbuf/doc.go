// Package grpcbuf keeps the messages a gRPC peer receives in buffers close
// to their size.
//
// gRPC's proto codec copies a received message that spans more than one
// HTTP/2 frame into one buffer from gRPC's default pool, whose tiers are
// 256 B, 4, 16 and 32 KiB and 1 MiB. A CRI list of 100 pods is 40 to
// 100 KiB, so each relist took a 1 MiB buffer, and the pool kept one per
// list call alive between relists (2.2 MB of the agent's 10.6 MB live heap
// at 100 fake-runtime pods). Codec is that codec with a pool of every
// power of two from 256 B to 1 MiB, so a message never takes more than
// twice its size.
//
// The codec registry is process-wide: a program calls Register once,
// first thing in main, before it makes any gRPC connection or server.
package grpcbuf

// Package probes will own liveness, readiness and startup probes (exec,
// httpGet, tcpSocket, grpc) and the lifecycle hook runner (postStart,
// preStop), with one worker per container and probe type, and results
// delivered on a receive-only channel.
//
// It does not restart containers itself; the sync loop acts on results.
package probes

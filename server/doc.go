// Package server will own the kubelet HTTP API on :10250 — health, pods,
// container logs, exec/attach/port-forward through the runtime's streaming
// server, metrics and stats — with x509/token authentication and
// SubjectAccessReview authorization.
//
// It does not collect stats or run containers; it serves what others own.
package server

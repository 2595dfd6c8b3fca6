// Package rpc is the gRPC-over-unix-socket plumbing shared by every netdra
// process.
//
// A process serves its API with a [Server]: a gRPC server bound to a unix
// socket created by [Listen], which admits only peers whose SO_PEERCRED uid
// is on an allow-list, recovers handler panics, logs finished calls through
// an injected [log/slog.Logger] and always answers grpc.health.v1 and server
// reflection. Running a Server for a process's lifetime (signals, the other
// actors of its run group) is package process's job.
//
// Clients connect with [Dial], whose connections outlive server restarts, and
// keep long-lived watch streams open with [Retry]. [CheckHealth] backs the
// processes' health subcommands used as exec probes. [OutcomeUnknown] tells
// a caller that rolls back whether a failed call may still have done its
// work.
package rpc

// Package api serves the state store as netdra.state.v1.StateService: it
// maps the store's errors to gRPC status codes and nothing more.
package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/state/store"
)

// Server is the StateService on top of a store.
type Server struct {
	statev1.UnimplementedStateServiceServer
	store *store.Store
}

var _ statev1.StateServiceServer = (*Server)(nil)

// New returns the service for st.
func New(st *store.Store) *Server { return &Server{store: st} }

func call[Req, Resp any](f func(Req) (Resp, error), req Req) (Resp, error) {
	resp, err := f(req)
	return resp, Status(err)
}

// ReplaceDevices implements StateServiceServer.
func (s *Server) ReplaceDevices(_ context.Context, req *statev1.ReplaceDevicesRequest) (*statev1.ReplaceDevicesResponse, error) {
	return call(s.store.ReplaceDevices, req)
}

// ListDevices implements StateServiceServer.
func (s *Server) ListDevices(_ context.Context, req *statev1.ListDevicesRequest) (*statev1.ListDevicesResponse, error) {
	return call(s.store.ListDevices, req)
}

// BeginPrepare implements StateServiceServer.
func (s *Server) BeginPrepare(_ context.Context, req *statev1.BeginPrepareRequest) (*statev1.BeginPrepareResponse, error) {
	return call(s.store.BeginPrepare, req)
}

// CommitPrepare implements StateServiceServer.
func (s *Server) CommitPrepare(_ context.Context, req *statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error) {
	return call(s.store.CommitPrepare, req)
}

// RecordPrepared implements StateServiceServer.
func (s *Server) RecordPrepared(_ context.Context, req *statev1.RecordPreparedRequest) (*statev1.RecordPreparedResponse, error) {
	return call(s.store.RecordPrepared, req)
}

// AbortPrepare implements StateServiceServer.
func (s *Server) AbortPrepare(_ context.Context, req *statev1.AbortPrepareRequest) (*statev1.AbortPrepareResponse, error) {
	return call(s.store.AbortPrepare, req)
}

// RestoreAllocations implements StateServiceServer.
func (s *Server) RestoreAllocations(_ context.Context, req *statev1.RestoreAllocationsRequest) (*statev1.RestoreAllocationsResponse, error) {
	return call(s.store.RestoreAllocations, req)
}

// ListAllocations implements StateServiceServer.
func (s *Server) ListAllocations(_ context.Context, req *statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
	return call(s.store.ListAllocations, req)
}

// MarkAttached implements StateServiceServer.
func (s *Server) MarkAttached(_ context.Context, req *statev1.MarkAttachedRequest) (*statev1.MarkAttachedResponse, error) {
	return call(s.store.MarkAttached, req)
}

// MarkAttachFailed implements StateServiceServer.
func (s *Server) MarkAttachFailed(_ context.Context, req *statev1.MarkAttachFailedRequest) (*statev1.MarkAttachFailedResponse, error) {
	return call(s.store.MarkAttachFailed, req)
}

// MarkDetached implements StateServiceServer.
func (s *Server) MarkDetached(_ context.Context, req *statev1.MarkDetachedRequest) (*statev1.MarkDetachedResponse, error) {
	return call(s.store.MarkDetached, req)
}

// MarkFreeFailed implements StateServiceServer.
func (s *Server) MarkFreeFailed(_ context.Context, req *statev1.MarkFreeFailedRequest) (*statev1.MarkFreeFailedResponse, error) {
	return call(s.store.MarkFreeFailed, req)
}

// DeleteAllocation implements StateServiceServer.
func (s *Server) DeleteAllocation(_ context.Context, req *statev1.DeleteAllocationRequest) (*statev1.DeleteAllocationResponse, error) {
	return call(s.store.DeleteAllocation, req)
}

// ReplaceIPPools implements StateServiceServer.
func (s *Server) ReplaceIPPools(_ context.Context, req *statev1.ReplaceIPPoolsRequest) (*statev1.ReplaceIPPoolsResponse, error) {
	return call(s.store.ReplaceIPPools, req)
}

// ListIPPools implements StateServiceServer.
func (s *Server) ListIPPools(context.Context, *statev1.ListIPPoolsRequest) (*statev1.ListIPPoolsResponse, error) {
	return s.store.ListIPPools(), nil
}

// Dump implements StateServiceServer.
func (s *Server) Dump(context.Context, *statev1.DumpRequest) (*statev1.DumpResponse, error) {
	return s.store.Dump(), nil
}

// Watch implements StateServiceServer.
func (s *Server) Watch(req *statev1.WatchRequest, stream statev1.StateService_WatchServer) error {
	err := s.store.Watch(stream.Context(), req.GetEpoch(), req.GetRevision(), stream.Send)
	if ctxErr := stream.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return status.FromContextError(ctxErr).Err()
	}
	return Status(err)
}

// Status maps a store error to a gRPC status: a bad field (a
// *fielderr.Error) is InvalidArgument with the field named, a device
// held elsewhere AlreadyExists, a missing row NotFound, a wrong phase
// FailedPrecondition, a closed store Unavailable, an exhausted address
// pool ResourceExhausted.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, store.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, store.ErrPhase):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, store.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, store.ErrExhausted):
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

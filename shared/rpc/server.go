package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// DefaultStopTimeout is how long [Server.Stop] waits for in-flight calls when
// ServerConfig.StopTimeout is zero.
const DefaultStopTimeout = 5 * time.Second

// ServerConfig configures a [Server].
type ServerConfig struct {
	// SocketPath is the unix socket the server listens on; see [Listen].
	SocketPath string
	// AllowedUIDs are the peer uids (SO_PEERCRED) allowed to call. Empty
	// means the server's own uid and root.
	AllowedUIDs []uint32
	// Logger receives call and lifecycle logs. Nil means slog.Default().
	Logger *slog.Logger
	// StopTimeout bounds the graceful part of Stop. Zero means
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Unary and Stream are interceptors that run first, around every call
	// (the health service's too, and calls the uid allow-list refuses):
	// metrics, say. Nil: none.
	Unary  grpc.UnaryServerInterceptor
	Stream grpc.StreamServerInterceptor
}

// Server is a gRPC server on a unix socket that also answers grpc.health.v1
// and server reflection (v1 and v1alpha). Every call passes through panic
// recovery, call logging and the peer uid allow-list.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	grpc   *grpc.Server
	health *health.Server

	mu      sync.Mutex
	stopped bool
	serving bool
	stop    sync.Once
}

// NewServer returns a Server for cfg. It does not listen until Serve.
func NewServer(cfg ServerConfig) *Server {
	return newServer(cfg)
}

// StandInService is the health service a stand-in server (NewStandIn)
// reports SERVING, and a process's real server never names.
const StandInService = "netdra.StandIn"

// NewStandIn returns a Server for cfg that stands in for a process waiting
// for its turn (process.StandBy): its health check answers SERVING for the
// server as a whole (a readiness probe passes: the process is ready to
// take over) and for StandInService, and every other call fails with
// Unavailable, why its message, as a server that is down would: its
// clients wait or try again as they do for a restart.
func NewStandIn(cfg ServerConfig, why string) *Server {
	s := newServer(cfg, grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unavailable, why)
	}))
	s.SetServing(StandInService, true)
	return s
}

func newServer(cfg ServerConfig, opts ...grpc.ServerOption) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	allowed := slices.Clone(cfg.AllowedUIDs)
	if len(allowed) == 0 {
		allowed = []uint32{uint32(os.Getuid()), 0}
	}
	log := cfg.Logger.With("socket", cfg.SocketPath)
	gate := uidGate{allowed: allowed, socketPath: cfg.SocketPath}

	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(serverCodeToLevel),
		logging.WithFieldsFromContext(peerFields),
	}
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthpb.Health_ServiceDesc.ServiceName
	})
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		method, _ := grpc.Method(ctx)
		log.ErrorContext(ctx, "Handler panicked", "method", method, "panic", p, "stack", string(debug.Stack()))
		return status.Errorf(codes.Internal, "panic in %s: %v", method, p)
	})

	unary := []grpc.UnaryServerInterceptor{
		selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(slogAdapter(log), logOpts...), notHealth),
		gate.unary,
		recovery.UnaryServerInterceptor(recoverOpt),
	}
	if cfg.Unary != nil {
		unary = append([]grpc.UnaryServerInterceptor{cfg.Unary}, unary...)
	}
	stream := []grpc.StreamServerInterceptor{
		selector.StreamServerInterceptor(logging.StreamServerInterceptor(slogAdapter(log), logOpts...), notHealth),
		gate.stream,
		recovery.StreamServerInterceptor(recoverOpt),
	}
	if cfg.Stream != nil {
		stream = append([]grpc.StreamServerInterceptor{cfg.Stream}, stream...)
	}
	s := &Server{
		cfg:    cfg,
		log:    log,
		health: health.NewServer(),
		grpc: grpc.NewServer(append([]grpc.ServerOption{
			grpc.Creds(peerCreds{}),
			grpc.ChainUnaryInterceptor(unary...),
			grpc.ChainStreamInterceptor(stream...),
		}, opts...)...),
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s
}

// GRPC returns the underlying grpc.Server. Services must be registered on it
// before Serve.
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// SetServing sets the health status reported for service; "" is the server
// as a whole, which starts SERVING. It has no effect once Stop has begun.
func (s *Server) SetServing(service string, serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(service, st)
}

// Serve listens on the configured socket and serves until Stop. It returns
// nil after Stop, also when Stop came first, and an error when the socket
// cannot be listened on or serving fails.
func (s *Server) Serve() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("server already serving")
	}
	lis, err := Listen(s.cfg.SocketPath)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.serving = true
	s.mu.Unlock()

	s.log.Info("Serving gRPC")
	err = s.grpc.Serve(lis)
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		// Covers grpc.ErrServerStopped when Stop raced with Serve.
		return nil
	}
	return fmt.Errorf("serve %s: %w", s.cfg.SocketPath, err)
}

// Stop marks every health status NOT_SERVING, stops accepting connections
// and waits up to the stop timeout for in-flight calls to finish; calls
// still running then, such as open streams, are cancelled. It is safe to
// call before or after Serve and more than once; every call returns once the
// server has stopped.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()

		s.health.Shutdown()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(s.cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			s.log.Warn("Graceful stop timed out, cancelling remaining calls", "timeout", s.cfg.StopTimeout)
			s.grpc.Stop()
			<-done
		}
		s.log.Info("Stopped gRPC server")
	})
}

// serverCodeToLevel logs successful calls at Debug and others as the
// middleware does by default.
func serverCodeToLevel(c codes.Code) logging.Level {
	if c == codes.OK {
		return logging.LevelDebug
	}
	return logging.DefaultServerCodeToLevel(c)
}

// peerFields adds the caller's identity to call logs; the peer address of a
// unix socket client says nothing.
func peerFields(ctx context.Context) logging.Fields {
	pc, ok := PeerCredFromContext(ctx)
	if !ok {
		return nil
	}
	return logging.Fields{"peer.pid", pc.PID, "peer.uid", pc.UID}
}

// slogAdapter makes l the logger of the logging interceptors.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

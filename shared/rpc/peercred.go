package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// peerCredAuthType is the AuthType of [PeerCred] and the security protocol
// name of the server's transport credentials.
const peerCredAuthType = "peercred"

// PeerCred is the credentials.AuthInfo a [Server] attaches to every
// connection: the identity of the peer process as the kernel reported it
// (SO_PEERCRED) when the connection was accepted. It provides no transport
// security; the socket never leaves the node.
type PeerCred struct {
	credentials.CommonAuthInfo
	PID int32
	UID uint32
	GID uint32
}

// AuthType implements credentials.AuthInfo.
func (PeerCred) AuthType() string { return peerCredAuthType }

// PeerCredFromContext returns the credentials of the peer of the call whose
// server-side context is ctx. It reports false outside a call served by a
// [Server].
func PeerCredFromContext(ctx context.Context) (PeerCred, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return PeerCred{}, false
	}
	pc, ok := p.AuthInfo.(PeerCred)
	return pc, ok
}

// peerCreds are server-side credentials.TransportCredentials that leave the
// connection untouched and record the peer's SO_PEERCRED. Clients connect
// with insecure credentials; the two handshakes are compatible because
// neither exchanges any bytes.
type peerCreds struct{}

var _ credentials.TransportCredentials = peerCreds{}

func (peerCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cred, err := readPeerCred(conn)
	if err != nil {
		return nil, nil, err
	}
	return conn, cred, nil
}

func (peerCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("peercred credentials are server-side only; dial with insecure credentials")
}

func (peerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: peerCredAuthType}
}

func (c peerCreds) Clone() credentials.TransportCredentials { return c }

func (peerCreds) OverrideServerName(string) error { return nil }

// AdmitUIDs returns a check of a unix socket connection's peer uid
// (SO_PEERCRED) against allowed, as a [Server] vets its calls (empty:
// this process's uid and root), for the sockets that speak another
// protocol: the error names the uid refused.
func AdmitUIDs(socketPath string, allowed []uint32) func(net.Conn) error {
	if len(allowed) == 0 {
		allowed = []uint32{uint32(os.Getuid()), 0}
	}
	return func(conn net.Conn) error {
		pc, err := readPeerCred(conn)
		if err != nil {
			return err
		}
		if !slices.Contains(allowed, pc.UID) {
			return fmt.Errorf("peer uid %d is not allowed on %s", pc.UID, socketPath)
		}
		return nil
	}
}

// readPeerCred reads SO_PEERCRED off a unix socket connection.
func readPeerCred(conn net.Conn) (PeerCred, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return PeerCred{}, fmt.Errorf("peer credentials: %T has no file descriptor", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var (
		ucred  *unix.Ucred
		optErr error
	)
	err = raw.Control(func(fd uintptr) {
		ucred, optErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = optErr
	}
	if err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: SO_PEERCRED: %w", err)
	}
	return PeerCred{
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity},
		PID:            ucred.Pid,
		UID:            ucred.Uid,
		GID:            ucred.Gid,
	}, nil
}

// uidGate admits calls whose peer uid is on an allow-list.
type uidGate struct {
	allowed    []uint32
	socketPath string
}

func (g uidGate) check(ctx context.Context) error {
	pc, ok := PeerCredFromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "peer credentials unknown")
	}
	if !slices.Contains(g.allowed, pc.UID) {
		return status.Errorf(codes.PermissionDenied, "peer uid %d is not allowed on %s", pc.UID, g.socketPath)
	}
	return nil
}

func (g uidGate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := g.check(ctx); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (g uidGate) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := g.check(ss.Context()); err != nil {
		return err
	}
	return h(srv, ss)
}

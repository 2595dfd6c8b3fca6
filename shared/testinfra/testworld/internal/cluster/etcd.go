package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netdra/netdra/shared/testinfra/testenv"
)

type etcdServer struct {
	e   *embed.Etcd
	url string
}

func (s *etcdServer) Close() { s.e.Close() }

// startEtcd starts a single-member etcd on free loopback ports, without
// fsync: the data is thrown away with the world.
func startEtcd(ctx context.Context, dir string) (*etcdServer, error) {
	cfg := embed.NewConfig()
	cfg.Name = "testworld"
	cfg.Dir = dir
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = true
	client, err := loopbackURL()
	if err != nil {
		return nil, err
	}
	peer, err := loopbackURL()
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &etcdServer{e: e, url: client.String()}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	case <-time.After(time.Minute):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after a minute")
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
}

// loopbackURL picks a free port on 127.0.0.1 (testenv.PortOn's) for etcd
// to listen on.
func loopbackURL() (*url.URL, error) {
	p, err := testenv.PortOn()
	if err != nil {
		return nil, fmt.Errorf("free port: %w", err)
	}
	return &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))}, nil
}

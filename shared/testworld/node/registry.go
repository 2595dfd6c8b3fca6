package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	// resyncPeriod is how often the registry directory is rescanned
	// besides the inotify events, as the kubelet's plugin manager
	// reconciler does every second.
	resyncPeriod = time.Second
	// retryPeriod is how soon a failed registration is retried: a socket
	// shows up at bind(), a moment before its plugin listens on it.
	retryPeriod = 100 * time.Millisecond
	// warnAfter is how many failed registrations of one socket are logged
	// at debug level before a warning.
	warnAfter = 5
)

// registry plays the kubelet's plugin manager for DRA plugins: it watches
// the registration directory, registers every new socket (GetInfo, then
// NotifyRegistrationStatus) and keeps one gRPC connection per driver.
type registry struct {
	dir string
	log *slog.Logger

	mu       sync.Mutex
	bySocket map[string]*registration // registration socket path -> registration
	drivers  map[string]*registration // driver name -> newest registration
	failed   map[string]failure       // sockets whose registration failed
}

// failure counts the failed registrations of one socket.
type failure struct {
	id    fileID
	count int
}

// registration is one registration socket as last seen and what it said.
type registration struct {
	socket   string
	id       fileID
	driver   string // empty when the plugin was rejected
	endpoint string
	conn     *grpc.ClientConn
	client   drav1.DRAPluginClient
}

// fileID tells a socket from one re-created at the same path.
type fileID struct {
	ino   uint64
	ctime int64
}

func newRegistry(dir string, logger *slog.Logger) *registry {
	return &registry{
		dir: dir, log: logger,
		bySocket: map[string]*registration{},
		drivers:  map[string]*registration{},
		failed:   map[string]failure{},
	}
}

// start scans the directory once and then keeps watching it until ctx ends.
func (r *registry) start(ctx context.Context, wg *sync.WaitGroup) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", r.dir, err)
	}
	if err := w.Add(r.dir); err != nil {
		w.Close()
		return fmt.Errorf("watching %s: %w", r.dir, err)
	}
	pending := r.reconcile(ctx, w)
	wg.Go(func() {
		defer w.Close()
		t := time.NewTicker(resyncPeriod)
		defer t.Stop()
		retry := time.NewTimer(retryPeriod)
		defer retry.Stop()
		for {
			if !pending {
				retry.Stop()
			}
			select {
			case <-ctx.Done():
				return
			case <-w.Events:
			case err := <-w.Errors:
				r.log.Warn("plugin registry watch", "err", err)
			case <-t.C:
			case <-retry.C:
			}
			if pending = r.reconcile(ctx, w); pending {
				retry.Reset(retryPeriod)
			}
		}
	})
	return nil
}

// reconcile registers new or re-created sockets and forgets removed ones.
// It reports whether a registration failed and should be retried soon.
func (r *registry) reconcile(ctx context.Context, w *fsnotify.Watcher) (pending bool) {
	found := map[string]fileID{}
	_ = filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") && path != r.dir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if path != r.dir {
				_ = w.Add(path) // the kubelet watches subdirectories too
			}
			return nil
		}
		if d.Type()&fs.ModeSocket == 0 {
			return nil
		}
		if id, ok := statID(path); ok {
			found[path] = id
		}
		return nil
	})

	r.mu.Lock()
	var stale []*registration
	for path, reg := range r.bySocket {
		if id, ok := found[path]; !ok || id != reg.id {
			stale = append(stale, reg)
		}
	}
	for _, reg := range stale {
		r.removeLocked(reg)
	}
	var todo []string
	for path, id := range found {
		if _, ok := r.bySocket[path]; !ok {
			todo = append(todo, path)
		}
		if f, ok := r.failed[path]; ok && f.id != id {
			delete(r.failed, path)
		}
	}
	for path := range r.failed {
		if _, ok := found[path]; !ok {
			delete(r.failed, path)
		}
	}
	r.mu.Unlock()

	slices.Sort(todo)
	for _, path := range todo {
		reg, err := register(ctx, path, found[path])
		r.mu.Lock()
		if err != nil {
			f := r.failed[path]
			f.id = found[path]
			f.count++
			r.failed[path] = f
			level := slog.LevelDebug
			if f.count == warnAfter {
				level = slog.LevelWarn
			}
			r.log.Log(ctx, level, "registering plugin", "socket", path, "attempt", f.count, "err", err)
			pending = pending || f.count < warnAfter
			r.mu.Unlock()
			continue
		}
		delete(r.failed, path)
		r.bySocket[path] = reg
		if reg.driver != "" {
			if old := r.drivers[reg.driver]; old != nil && old.conn != nil {
				old.conn.Close()
				old.conn = nil
			}
			r.drivers[reg.driver] = reg
			r.log.Info("DRA plugin registered", "driver", reg.driver, "endpoint", reg.endpoint)
		}
		r.mu.Unlock()
	}
	return pending
}

func (r *registry) removeLocked(reg *registration) {
	delete(r.bySocket, reg.socket)
	if reg.driver == "" || r.drivers[reg.driver] != reg {
		return
	}
	delete(r.drivers, reg.driver)
	if reg.conn != nil {
		reg.conn.Close()
	}
	r.log.Info("DRA plugin deregistered", "driver", reg.driver, "socket", reg.socket)
}

func statID(path string) (fileID, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{ino: st.Ino, ctime: st.Ctim.Nano()}, true
}

// register does what the kubelet's plugin manager does with a new socket:
// GetInfo, validate, then NotifyRegistrationStatus. A plugin of another type
// or without the v1 DRA service is told it was not registered, and
// remembered as rejected so it is not asked again.
func register(ctx context.Context, socket string, id fileID) (*registration, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", socket, err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := client.GetInfo(callCtx, &registerapi.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetInfo: %w", err)
	}
	reg := &registration{socket: socket, id: id, endpoint: info.Endpoint}
	if reg.endpoint == "" {
		reg.endpoint = socket
	}
	var reject error
	switch {
	case info.Type != registerapi.DRAPlugin:
		reject = fmt.Errorf("no handler registered for plugin type: %s at socket %s", info.Type, socket)
	case info.Name == "":
		reject = errors.New("plugin has no name")
	case !slices.Contains(info.SupportedVersions, drav1.DRAPluginService):
		reject = fmt.Errorf("none of the services supported by the plugin (%q) is supported by the node (%q)", info.SupportedVersions, drav1.DRAPluginService)
	}
	if reject != nil {
		_, err := client.NotifyRegistrationStatus(callCtx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "RegisterPlugin error -- " + reject.Error()})
		if err != nil {
			return nil, fmt.Errorf("NotifyRegistrationStatus: %w", err)
		}
		return reg, nil
	}
	dra, err := grpc.NewClient("unix://"+reg.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dialing DRA endpoint %s: %w", reg.endpoint, err)
	}
	if _, err := client.NotifyRegistrationStatus(callCtx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		dra.Close()
		return nil, fmt.Errorf("NotifyRegistrationStatus: %w", err)
	}
	reg.driver, reg.conn, reg.client = info.Name, dra, drav1.NewDRAPluginClient(dra)
	return reg, nil
}

// client returns the DRA client of driver.
func (r *registry) client(driver string) (drav1.DRAPluginClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.drivers[driver]
	if reg == nil {
		return nil, fmt.Errorf("%w: %s", ErrDriverNotRegistered, driver)
	}
	return reg.client, nil
}

func (r *registry) endpoint(driver string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.drivers[driver]
	if reg == nil {
		return "", false
	}
	return reg.endpoint, true
}

// close drops every registration and its connection.
func (r *registry) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range r.bySocket {
		r.removeLocked(reg)
	}
}

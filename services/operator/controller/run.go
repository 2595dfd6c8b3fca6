package controller

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Options configures Run.
type Options struct {
	// Refresh is the period of the full re-check; 0 is DefaultRefresh.
	Refresh time.Duration

	// LeaderElection makes replicas take turns through a Lease: only the
	// holder reconciles.
	LeaderElection bool
	// LeaderElectionNamespace and LeaderElectionID name the Lease; an
	// empty namespace is the pod's own (in a cluster only).
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election;
	// zero values are controller-runtime's (15s, 10s, 2s).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// MetricsAddr is where Prometheus metrics are served; "0" serves none.
	MetricsAddr string
	// HealthAddr is where /healthz and /readyz are served; "" serves none.
	HealthAddr string
}

// Run runs the operator against the cluster cfg points at until ctx ends
// (nil then), or until it fails or loses its Lease (an error). On a
// cancelled ctx it releases the Lease so another replica takes over at
// once.
func Run(ctx context.Context, log *slog.Logger, cfg *rest.Config, opts Options) error {
	mgr, err := NewManager(log, cfg, opts)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// NewManager returns a manager with the operator's controller and health
// checks, not started.
func NewManager(log *slog.Logger, cfg *rest.Config, opts Options) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	skipNameValidation := true // tests run several managers in one process
	mo := manager.Options{
		Scheme:                        scheme,
		Logger:                        logr.FromSlogHandler(log.Handler()),
		LeaderElection:                opts.LeaderElection,
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:        opts.HealthAddr,
		Controller:                    config.Controller{SkipNameValidation: &skipNameValidation},
	}
	if opts.LeaseDuration > 0 {
		mo.LeaseDuration = &opts.LeaseDuration
	}
	if opts.RenewDeadline > 0 {
		mo.RenewDeadline = &opts.RenewDeadline
	}
	if opts.RetryPeriod > 0 {
		mo.RetryPeriod = &opts.RetryPeriod
	}
	mgr, err := manager.New(cfg, mo)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Log: log, Refresh: opts.Refresh}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("readyz: %w", err)
	}
	return mgr, nil
}

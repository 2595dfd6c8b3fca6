package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	drav1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// claimRef names a claim the way the DRA gRPC API does.
type claimRef struct {
	Namespace, Name string
	UID             types.UID
}

func (c claimRef) String() string { return c.Namespace + "/" + c.Name }

// podClaim is one claim a pod uses, with the drivers that allocated it.
type podClaim struct {
	claimRef
	drivers []string
}

// resolveClaims returns the claims of pod with the drivers of their
// allocated devices. ready is false while a generated claim's name is not
// in the pod status yet (the resourceclaim controller is not done): the
// pod's next update brings it. An error means a claim is not usable.
func resolveClaims(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) (claims []podClaim, ready bool, err error) {
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, mustCheckOwner, err := resourceclaim.Name(pod, pc)
		if errors.Is(err, resourceclaim.ErrClaimNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrClaimNotUsable, err)
		}
		if name == nil {
			continue // the template decided no claim is needed
		}
		claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("fetching claim %s/%s: %w", pod.Namespace, *name, err)
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, claim, true); err != nil {
				return nil, false, fmt.Errorf("%w: %w", ErrClaimNotUsable, err)
			}
		}
		if claim.Status.Allocation == nil {
			return nil, false, fmt.Errorf("%w: claim %s/%s is not allocated", ErrClaimNotUsable, claim.Namespace, claim.Name)
		}
		if !resourceclaim.IsReservedForPod(pod, claim, true) {
			return nil, false, fmt.Errorf("%w: pod %s/%s (%s) is not allowed to use claim %s/%s", ErrClaimNotUsable, pod.Namespace, pod.Name, pod.UID, claim.Namespace, claim.Name)
		}
		claims = append(claims, podClaim{
			claimRef: claimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
			drivers:  drivers(claim),
		})
	}
	return claims, true, nil
}

func drivers(claim *resourceapi.ResourceClaim) []string {
	var ds []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if !slices.Contains(ds, r.Driver) {
			ds = append(ds, r.Driver)
		}
	}
	slices.Sort(ds)
	return ds
}

// claimCache is the kubelet's claim info cache: which claims are prepared
// by which drivers and which pods use them. A claim is prepared once, when
// its first pod needs it, and unprepared when its last pod is gone. Every
// claim a prepare was attempted for is unprepared, since a driver may have
// done part of the work before failing.
type claimCache struct {
	plugins *registry
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	claims map[types.UID]*claimEntry
}

type claimEntry struct {
	mu        sync.Mutex // held across the gRPC calls for this claim
	ref       claimRef
	drivers   []string
	prepared  sets.Set[string] // drivers that prepared the claim
	attempted sets.Set[string] // drivers asked to prepare it
	pods      sets.Set[types.UID]
	gone      bool // unprepared and dropped from the cache
}

func newClaimCache(plugins *registry, timeout time.Duration, logger *slog.Logger) *claimCache {
	return &claimCache{plugins: plugins, timeout: timeout, log: logger, claims: map[types.UID]*claimEntry{}}
}

// lockEntries returns the entries of uids, created for pod if missing,
// locked in UID order.
func (c *claimCache) lockEntries(pod types.UID, claims []podClaim) []*claimEntry {
	for {
		c.mu.Lock()
		entries := make([]*claimEntry, 0, len(claims))
		for _, pc := range claims {
			e := c.claims[pc.UID]
			if e == nil {
				e = &claimEntry{ref: pc.claimRef, drivers: pc.drivers, prepared: sets.New[string](), attempted: sets.New[string](), pods: sets.New[types.UID]()}
				c.claims[pc.UID] = e
			}
			entries = append(entries, e)
		}
		c.mu.Unlock()
		slices.SortFunc(entries, func(a, b *claimEntry) int { return compareUID(a.ref.UID, b.ref.UID) })
		retry := false
		for i, e := range entries {
			e.mu.Lock()
			if e.gone { // unprepared meanwhile: start over with a fresh entry
				for _, l := range entries[:i+1] {
					l.mu.Unlock()
				}
				retry = true
				break
			}
		}
		if !retry {
			for _, e := range entries {
				e.pods.Insert(pod)
			}
			return entries
		}
	}
}

func compareUID(a, b types.UID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// prepare makes sure every claim of the pod is prepared by each of its
// drivers, calling NodePrepareResources once per driver for the claims
// that driver has not prepared yet.
func (c *claimCache) prepare(ctx context.Context, pod types.UID, claims []podClaim) error {
	if len(claims) == 0 {
		return nil
	}
	entries := c.lockEntries(pod, claims)
	defer func() {
		for _, e := range entries {
			e.mu.Unlock()
		}
	}()
	batches := map[string][]*claimEntry{}
	for _, e := range entries {
		for _, d := range e.drivers {
			if !e.prepared.Has(d) {
				batches[d] = append(batches[d], e)
			}
		}
	}
	var errs []error
	for _, driver := range sortedKeys(batches) {
		errs = append(errs, c.prepareBatch(ctx, driver, batches[driver]))
	}
	return errors.Join(errs...)
}

func (c *claimCache) prepareBatch(ctx context.Context, driver string, entries []*claimEntry) error {
	client, err := c.plugins.client(driver)
	if err != nil {
		return err
	}
	req := &drav1.NodePrepareResourcesRequest{}
	for _, e := range entries {
		e.attempted.Insert(driver)
		req.Claims = append(req.Claims, &drav1.Claim{Namespace: e.ref.Namespace, Name: e.ref.Name, Uid: string(e.ref.UID)})
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := client.NodePrepareResources(ctx, req)
	if err != nil {
		return fmt.Errorf("NodePrepareResources of driver %s: %w", driver, err)
	}
	var errs []error
	for _, e := range entries {
		r, ok := resp.Claims[string(e.ref.UID)]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("NodePrepareResources of driver %s left out claim %s", driver, e.ref))
		case r.Error != "":
			errs = append(errs, fmt.Errorf("NodePrepareResources of driver %s failed for claim %s: %s", driver, e.ref, r.Error))
		default:
			e.prepared.Insert(driver)
			c.log.Debug("claim prepared", "claim", e.ref.String(), "driver", driver, "devices", len(r.Devices))
		}
	}
	return errors.Join(errs...)
}

// release drops the pod from its claims and unprepares, with each driver
// asked to prepare it, every claim no pod uses any more. On error the
// claims stay in the cache and a later release retries them.
func (c *claimCache) release(ctx context.Context, pod types.UID, uids []types.UID) error {
	var errs []error
	for _, uid := range uids {
		c.mu.Lock()
		e := c.claims[uid]
		c.mu.Unlock()
		if e == nil {
			continue
		}
		errs = append(errs, c.releaseEntry(ctx, pod, e))
	}
	return errors.Join(errs...)
}

func (c *claimCache) releaseEntry(ctx context.Context, pod types.UID, e *claimEntry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return nil
	}
	e.pods.Delete(pod)
	if e.pods.Len() > 0 {
		return nil
	}
	var errs []error
	for _, driver := range sets.List(e.attempted) {
		if err := c.unprepare(ctx, driver, e.ref); err != nil {
			errs = append(errs, err)
			continue
		}
		e.attempted.Delete(driver)
		e.prepared.Delete(driver)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	e.gone = true
	c.mu.Lock()
	delete(c.claims, e.ref.UID)
	c.mu.Unlock()
	return nil
}

func (c *claimCache) unprepare(ctx context.Context, driver string, ref claimRef) error {
	client, err := c.plugins.client(driver)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := client.NodeUnprepareResources(ctx, &drav1.NodeUnprepareResourcesRequest{
		Claims: []*drav1.Claim{{Namespace: ref.Namespace, Name: ref.Name, Uid: string(ref.UID)}},
	})
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources of driver %s: %w", driver, err)
	}
	r, ok := resp.Claims[string(ref.UID)]
	switch {
	case !ok:
		return fmt.Errorf("NodeUnprepareResources of driver %s left out claim %s", driver, ref)
	case r.Error != "":
		return fmt.Errorf("NodeUnprepareResources of driver %s failed for claim %s: %s", driver, ref, r.Error)
	}
	c.log.Debug("claim unprepared", "claim", ref.String(), "driver", driver)
	return nil
}

// prepared reports whether every driver of the claim prepared it.
func (c *claimCache) prepared(uid types.UID) bool {
	c.mu.Lock()
	e := c.claims[uid]
	c.mu.Unlock()
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.gone && e.prepared.Len() == len(e.drivers)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

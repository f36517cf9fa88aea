package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// PrepareResources makes the pod's claims ready: it reads each claim,
// checks that it is allocated and reserved for the pod, records the pod as
// a user of the claim (checkpointed before the driver is called, so a
// crash leaks nothing) and calls NodePrepareResources, one batch per
// driver, for the claims not prepared yet. A claim several pods share is
// prepared once. It blocks on the API server and the drivers; it is
// idempotent and a pod whose claims are all prepared costs no call.
//
// An error is a sync error, as upstream's: the sync loop records the
// FailedPrepareDynamicResources event and tries again, so a claim the
// scheduler has not reserved yet ("is not allowed to use ResourceClaim")
// or a driver not registered yet is waited for, not refused.
func (m *Manager) PrepareResources(ctx context.Context, pod *v1.Pod) error {
	if err := m.prepare(ctx, pod); err != nil {
		return fmt.Errorf("prepare dynamic resources: %w", err)
	}
	return nil
}

type pending struct {
	key    string
	claim  *resourceapi.ResourceClaim
	states map[string]driverState
}

func (m *Manager) prepare(ctx context.Context, pod *v1.Pod) error {
	names, owner, err := podClaimNames(pod)
	if err != nil || len(names) == 0 || m.allPrepared(pod, names) {
		return err
	}
	var claims []pending
	for _, name := range names {
		c, err := m.cfg.Claims.GetResourceClaim(ctx, pod.Namespace, name)
		if err != nil {
			return fmt.Errorf("fetch ResourceClaim %s: %w", name, err)
		}
		if owner[name] {
			if err := claimOwnedByPod(pod, c); err != nil {
				return err
			}
		}
		if !claimReservedForPod(pod, c) {
			return fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, name, c.UID)
		}
		states, err := driverStates(c)
		if err != nil {
			return fmt.Errorf("ResourceClaim %s: %w", c.Name, err)
		}
		for d := range states {
			if _, err := m.client(d); err != nil {
				return err
			}
		}
		claims = append(claims, pending{key: c.Namespace + "/" + c.Name, claim: c, states: states})
	}
	batches, err := m.reference(pod.UID, claims)
	if err != nil {
		return err
	}
	for name, batch := range batches {
		if err := m.callPrepare(ctx, name, batch); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range claims {
		if c := m.claims[p.key]; c != nil && c.ClaimUID == p.claim.UID {
			c.Prepared = true
		}
	}
	if err := m.save(); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	return nil
}

// reference adds pod to the users of claims, checkpoints, and returns the
// claims still to prepare, per driver.
func (m *Manager) reference(pod types.UID, claims []pending) (map[string][]*drapb.Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	batches := map[string][]*drapb.Claim{}
	for _, p := range claims {
		c := m.claims[p.key]
		switch {
		case c == nil:
			c = &claim{claimState: claimState{ClaimUID: p.claim.UID, ClaimName: p.claim.Name, Namespace: p.claim.Namespace,
				PodUIDs: map[string]struct{}{}, DriverState: p.states}}
			m.claims[p.key] = c
		case c.ClaimUID != p.claim.UID:
			return nil, fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", p.claim.Name, c.ClaimUID)
		case c.unpreparing:
			return nil, fmt.Errorf("ResourceClaim %s is being unprepared", p.claim.Name)
		}
		c.PodUIDs[string(pod)] = struct{}{}
		if c.Prepared {
			continue
		}
		for d := range c.DriverState {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: c.Namespace, Uid: string(c.ClaimUID), Name: c.ClaimName})
		}
	}
	if err := m.save(); err != nil {
		return nil, fmt.Errorf("checkpoint ResourceClaim cache: %w", err)
	}
	return batches, nil
}

// callPrepare calls driver name's NodePrepareResources for batch and
// records the devices it returns.
func (m *Manager) callPrepare(ctx context.Context, name string, batch []*drapb.Claim) error {
	client, err := m.client(name)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := client.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: batch})
	if err != nil {
		return fmt.Errorf("NodePrepareResources: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid, res := range resp.GetClaims() {
		req := lookup(batch, uid)
		if req == nil {
			return fmt.Errorf("NodePrepareResources returned result for unknown claim UID %s", uid)
		}
		if res.GetError() != "" {
			return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", req.Name, res.GetError())
		}
		c := m.claims[req.Namespace+"/"+req.Name]
		if c == nil {
			return fmt.Errorf("internal error: no cache entry for ResourceClaim %s in namespace %s", req.Name, req.Namespace)
		}
		st := c.DriverState[name]
		st.Devices = nil
		for _, d := range res.GetDevices() {
			st.Devices = append(st.Devices, deviceState{PoolName: d.GetPoolName(), DeviceName: d.GetDeviceName(),
				ShareID: (*types.UID)(d.ShareId), RequestNames: d.GetRequestNames(), CDIDeviceIDs: d.GetCdiDeviceIds()})
		}
		c.DriverState[name] = st
	}
	if n := len(batch) - len(resp.GetClaims()); n != 0 {
		return fmt.Errorf("NodePrepareResources skipped %d ResourceClaims", n)
	}
	return nil
}

func lookup(batch []*drapb.Claim, uid string) *drapb.Claim {
	for _, c := range batch {
		if c.Uid == uid {
			return c
		}
	}
	return nil
}

// UnprepareResources releases the pod's claims once its containers have
// stopped: the pod is dropped from each claim's users, and a claim left
// without users is unprepared (NodeUnprepareResources) and forgotten. It
// reads only the cache, so it works for a pod known by UID alone. It
// blocks on the drivers and is idempotent.
func (m *Manager) UnprepareResources(ctx context.Context, pod *v1.Pod) error {
	if err := m.unprepare(ctx, pod.UID); err != nil {
		return fmt.Errorf("unprepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) unprepare(ctx context.Context, pod types.UID) error {
	batches, keys, err := m.release(pod)
	if err != nil || len(keys) == 0 {
		return err
	}
	for name, batch := range batches {
		if err := m.callUnprepare(ctx, name, batch); err != nil {
			return err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.claims, k)
	}
	if err := m.save(); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Unprepared ResourceClaims", "podUID", pod, "claims", keys)
	return nil
}

// release drops pod from its claims' users and returns the claims it was
// the last user of, marked unpreparing, per driver.
func (m *Manager) release(pod types.UID) (map[string][]*drapb.Claim, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	batches := map[string][]*drapb.Claim{}
	var keys []string
	changed := false
	for _, k := range slices.Sorted(maps.Keys(m.claims)) {
		c := m.claims[k]
		if _, ok := c.PodUIDs[string(pod)]; !ok {
			continue
		}
		if len(c.PodUIDs) > 1 {
			delete(c.PodUIDs, string(pod))
			changed = true
			continue
		}
		c.unpreparing = true
		keys = append(keys, k)
		for d := range c.DriverState {
			batches[d] = append(batches[d], &drapb.Claim{Namespace: c.Namespace, Uid: string(c.ClaimUID), Name: c.ClaimName})
		}
	}
	if changed {
		if err := m.save(); err != nil {
			return nil, nil, fmt.Errorf("checkpoint ResourceClaim state: %w", err)
		}
	}
	return batches, keys, nil
}

// callUnprepare calls driver name's NodeUnprepareResources for batch. On
// failure the claims stay cached (no longer unpreparing) so the next sync
// or Reconcile tries again.
func (m *Manager) callUnprepare(ctx context.Context, name string, batch []*drapb.Claim) (err error) {
	defer func() {
		if err != nil {
			m.mu.Lock()
			for _, b := range batch {
				if c := m.claims[b.Namespace+"/"+b.Name]; c != nil {
					c.unpreparing = false
				}
			}
			m.mu.Unlock()
		}
	}()
	client, err := m.client(name)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := client.NodeUnprepareResources(cctx, &drapb.NodeUnprepareResourcesRequest{Claims: batch})
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	for uid, res := range resp.GetClaims() {
		req := lookup(batch, uid)
		if req == nil {
			return fmt.Errorf("NodeUnprepareResources returned result for unknown claim UID %s", uid)
		}
		if res.GetError() != "" {
			return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", req.Name, res.GetError())
		}
	}
	if n := len(batch) - len(resp.GetClaims()); n != 0 {
		return fmt.Errorf("NodeUnprepareResources skipped %d ResourceClaims", n)
	}
	return nil
}

package devicemgr

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodekit/nodekit"
)

// TestAllocationInvariants admits and removes random pods (init
// containers, sidecars and app containers with random requests of two
// resources) while devices turn healthy and unhealthy and the plugin's
// preferred allocation names random devices, free or not. After every
// step: no device is held by two pods, nor by two long-lived containers
// of one pod; a newly admitted pod holds only devices that were healthy;
// every admitted container holds what it asked for; a pod without init
// containers is admitted exactly when enough healthy free devices exist;
// a rejected pod holds nothing; no picked device leaks. At the end the
// checkpoint restores the same allocations.
func TestAllocationInvariants(t *testing.T) {
	seeds := uint64(40)
	if testing.Short() {
		seeds = 8
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runInvariants(t, rand.New(rand.NewPCG(seed, 0x5eed)))
		})
	}
}

func runInvariants(t *testing.T, r *rand.Rand) {
	_, ctx := ktesting.NewTestContext(t)
	active := &podSet{}
	m := newTestManager(t, ctx, Config{ActivePods: active.list})
	resources := map[string]int{"example.com/a": 2 + r.IntN(6), "example.com/b": 1 + r.IntN(4)}
	health := map[string]map[string]bool{}
	eps := map[string]*endpoint{}
	for res, n := range resources {
		all := make([]string, n)
		health[res] = map[string]bool{}
		for i := range n {
			all[i] = fmt.Sprintf("%s-%d", res[len("example.com/"):], i)
			health[res][all[i]] = r.IntN(5) > 0
		}
		client := &fakeClient{resource: res, preferred: func(_, _ []string, size int) []string {
			// Any devices at all, some unknown, some taken or unhealthy.
			var out []string
			for range r.IntN(size + 2) {
				if r.IntN(6) == 0 {
					out = append(out, "bogus")
				} else {
					out = append(out, all[r.IntN(len(all))])
				}
			}
			return out
		}}
		eps[res] = attach(m, res, client, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: res == "example.com/a"})
		report(ctx, m, eps[res], health[res])
	}
	names := sets.List(sets.KeySet(resources))

	next := 0
	sidecars := sets.New[string]() // "uid/name" of restartable init containers
	randReq := func() map[string]int {
		req := map[string]int{}
		for _, res := range names {
			if r.IntN(3) > 0 {
				req[res] = r.IntN(3)
			}
		}
		return req
	}
	for step := range 150 {
		switch k := r.IntN(10); {
		case k < 5: // admit a new pod
			next++
			uid := fmt.Sprintf("pod%d", next)
			var init []v1.Container
			hasInit := r.IntN(3) == 0
			if hasInit {
				for i := range 1 + r.IntN(2) {
					c := container(fmt.Sprintf("init%d", i), randReq())
					if r.IntN(2) == 0 {
						always := v1.ContainerRestartPolicyAlways
						c.RestartPolicy = &always
						sidecars.Insert(uid + "/" + c.Name)
					}
					init = append(init, c)
				}
			}
			var cs []v1.Container
			for i := range 1 + r.IntN(3) {
				cs = append(cs, container(fmt.Sprintf("app%d", i), randReq()))
			}
			pod := newPod(uid, init, cs...)

			// Healthy devices not held by an active pod, before the step.
			activeUIDs := sets.New[string]()
			for _, p := range active.list() {
				activeUIDs.Insert(string(p.UID))
			}
			free := map[string]sets.Set[string]{}
			for _, res := range names {
				free[res] = sets.New[string]()
				for id, ok := range health[res] {
					if ok {
						free[res].Insert(id)
					}
				}
			}
			for uid, cs := range held(m) {
				if !activeUIDs.Has(uid) {
					continue
				}
				for _, byRes := range cs {
					for res, ids := range byRes {
						free[res] = free[res].Difference(ids)
					}
				}
			}

			d := m.Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: active.list()})
			got := held(m)[uid]
			if d.Admit {
				active.add(pod)
				for _, c := range append(append([]v1.Container{}, init...), cs...) {
					for _, res := range names {
						q := c.Resources.Limits[v1.ResourceName(res)]
						want := int(q.Value())
						if n := got[c.Name][res].Len(); n != want {
							t.Fatalf("step %d: %s/%s holds %d of %s, asked for %d", step, uid, c.Name, n, res, want)
						}
					}
				}
				for _, byRes := range got {
					for res, ids := range byRes {
						if !free[res].IsSuperset(ids) {
							t.Fatalf("step %d: %s got %v of %s, not all healthy and free (%v)", step, uid, sets.List(ids), res, sets.List(free[res]))
						}
					}
				}
			} else {
				if d.Reason != ReasonUnexpectedAdmissionError || !strings.HasPrefix(d.Message, "Allocate failed due to ") || !strings.HasSuffix(d.Message, ", which is unexpected") {
					t.Fatalf("step %d: rejection %+v", step, d)
				}
				if len(got) != 0 {
					t.Fatalf("step %d: rejected %s still holds %v", step, uid, got)
				}
			}
			if !hasInit {
				fits := true
				for _, res := range names {
					total := 0
					for _, c := range cs {
						q := c.Resources.Limits[v1.ResourceName(res)]
						total += int(q.Value())
					}
					fits = fits && total <= free[res].Len()
				}
				if fits != d.Admit {
					t.Fatalf("step %d: %s admitted=%v (%s), but fits=%v with free %v", step, uid, d.Admit, d.Message, fits, free)
				}
			}
		case k < 8: // a pod goes away
			if pods := active.list(); len(pods) > 0 {
				active.remove(pods[r.IntN(len(pods))].UID)
			}
		default: // a device changes health
			res := names[r.IntN(len(names))]
			ids := sets.List(sets.KeySet(health[res]))
			id := ids[r.IntN(len(ids))]
			health[res][id] = !health[res][id]
			report(ctx, m, eps[res], health[res])
		}
		checkExclusive(t, m, step, sidecars)
	}

	// The checkpoint restores the same allocations.
	m2, err := New(ctx, Config{Dir: m.dir, ActivePods: active.list})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := held(m), held(m2); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("restored allocations differ:\n%v\n%v", a, b)
	}
	for uid, cs := range m.pods {
		for c, rs := range cs {
			for res, a := range rs {
				if !proto.Equal(a.resp, m2.pods[uid][c][res].resp) {
					t.Fatalf("restored response of %s/%s/%s differs", uid, c, res)
				}
			}
		}
	}
}

// checkExclusive checks that no device is held by two pods, nor by two
// long-lived containers (app containers, sidecars) of one pod, and that
// the allocated cache is exactly what the pods hold.
func checkExclusive(t *testing.T, m *Manager, step int, sidecars sets.Set[string]) {
	t.Helper()
	owner := map[string]string{}
	for uid, cs := range held(m) {
		longLived := map[string]string{}
		for c, byRes := range cs {
			for res, ids := range byRes {
				for id := range ids {
					key := res + "/" + id
					if o, ok := owner[key]; ok && o != uid {
						t.Fatalf("step %d: %s held by pods %s and %s", step, key, o, uid)
					}
					owner[key] = uid
					if strings.HasPrefix(c, "app") || sidecars.Has(uid+"/"+c) {
						if o, ok := longLived[key]; ok && o != c {
							t.Fatalf("step %d: %s held by containers %s and %s of pod %s", step, key, o, c, uid)
						}
						longLived[key] = c
					}
				}
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, b := fmt.Sprint(m.allocated), fmt.Sprint(m.pods.devices()); a != b {
		t.Fatalf("step %d: allocated cache %s, pods hold %s", step, a, b)
	}
}

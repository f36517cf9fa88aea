package userns_test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/quick"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/criruntime/userns"
)

func TestNewValidatesConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  userns.Config
		want string // "" for success
	}{
		{"default", userns.Config{}, ""},
		{"ids per pod not a multiple", userns.Config{IDsPerPod: 1000}, "kubelet user namespace length 1000 is not a multiple of 65536"},
		{"first ID zero maps host root", userns.Config{FirstID: 0, Length: 65536 * 4}, "kubelet user assigned ID 0 must be greater or equal to 65536"},
		{"first ID unaligned", userns.Config{FirstID: 65537, Length: 65536}, "kubelet user assigned ID 65537 is not a multiple of 65536"},
		{"length unaligned", userns.Config{FirstID: 65536, Length: 100}, "kubelet user assigned IDs length 100 is not a multiple of 65536"},
		{"too few for maxPods", userns.Config{FirstID: 65536, Length: 65536 * 2, MaxPods: 3}, "kubelet user assigned IDs are not enough to support 3 pods"},
		{"enough for maxPods", userns.Config{FirstID: 65536, Length: 65536 * 3, MaxPods: 3}, ""},
		{"up to 2^32", userns.Config{FirstID: 1 << 31, Length: 1 << 31}, ""},
		{"past 2^32", userns.Config{FirstID: 1<<31 + 65536, Length: 1 << 31}, "past 2^32"},
		{"ids per pod above the range start", userns.Config{IDsPerPod: 65536 * 2, FirstID: 65536 * 2, Length: 65536 * 3}, "kubelet user assigned IDs length 196608 is not a multiple of 131072"},
		{"default range, maxPods", userns.Config{MaxPods: 110}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.PodsDir = t.TempDir()
			_, err := userns.New(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("New: error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// firstFree makes the search start at slot 0: a fixed order for tests.
func firstFree(int) int { return 0 }

func TestGetDefaultMappingAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	a, err := userns.New(userns.Config{PodsDir: dir, Pick: firstFree})
	if err != nil {
		t.Fatal(err)
	}
	m, err := a.Get("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	if m != (userns.Mapping{HostID: 65536, Length: 65536}) {
		t.Fatalf("first mapping %+v, want host ID 65536 length 65536", m)
	}
	data, err := os.ReadFile(filepath.Join(dir, "pod-a", userns.FileName))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}`
	if string(data) != want {
		t.Fatalf("checkpoint %s, want upstream's format %s", data, want)
	}
	if again, _ := a.Get("pod-a"); again != m {
		t.Fatalf("second Get %+v, want %+v", again, m)
	}
	b, _ := a.Get("pod-b")
	if b.HostID != 2*65536 {
		t.Fatalf("second pod's host ID %d, want %d", b.HostID, 2*65536)
	}
	// A restarted allocator finds both and hands the next range out.
	a2, err := userns.New(userns.Config{PodsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := a2.Get("pod-a"); got != m {
		t.Fatalf("after restart pod-a has %+v, want %+v", got, m)
	}
	if c, _ := a2.Get("pod-c"); c.HostID == m.HostID || c.HostID == b.HostID {
		t.Fatalf("after restart pod-c got a taken range %+v", c)
	}
}

func TestGetStartsAtThePickedSlot(t *testing.T) {
	var asked []int
	pick := func(n int) int { asked = append(asked, n); return n - 1 }
	a, err := userns.New(userns.Config{PodsDir: t.TempDir(), FirstID: 65536, Length: 4 * 65536, Pick: pick})
	if err != nil {
		t.Fatal(err)
	}
	// The last slot first, then (taken) the search wraps round to slot 0.
	for _, want := range []uint32{4 * 65536, 65536} {
		m, err := a.Get(types.UID(fmt.Sprint("pod-", want)))
		if err != nil || m.HostID != want {
			t.Fatalf("Get: %+v, %v; want host ID %d", m, err, want)
		}
	}
	if len(asked) != 2 || asked[0] != 4 {
		t.Fatalf("Pick asked %v, want twice with the 4 slots", asked)
	}
}

func TestDefaultPickIsRandom(t *testing.T) {
	// With 65535 slots, ten pods in a row landing on ten consecutive
	// ranges from the first would mean the start is not random.
	a, err := userns.New(userns.Config{PodsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sequential := true
	for i := range 10 {
		m, err := a.Get(types.UID(fmt.Sprint("pod-", i)))
		if err != nil {
			t.Fatal(err)
		}
		sequential = sequential && m.HostID == uint32(i+1)*65536
	}
	if sequential {
		t.Fatal("ten pods got the first ten ranges in order: the default start is not random")
	}
}

func TestExhaustedAndReclaim(t *testing.T) {
	dir := t.TempDir()
	a, err := userns.New(userns.Config{PodsDir: dir, FirstID: 65536, Length: 2 * 65536, Pick: firstFree})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []types.UID{"a", "b"} {
		if _, err := a.Get(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Get("c"); err == nil || !strings.Contains(err.Error(), "could not find an empty slot") {
		t.Fatalf("third pod on a two-pod range: %v, want exhaustion", err)
	}
	// Pod a's directory goes (the pod was cleaned up): its range is free.
	if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if m, err := a.Get("c"); err != nil || m.HostID != 65536 {
		t.Fatalf("after pod a's directory went: %+v, %v; want a's range", m, err)
	}
	if err := a.Cleanup(func(uid types.UID) bool { return uid == "c" }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b", userns.FileName)); !os.IsNotExist(err) {
		t.Fatalf("Cleanup left pod b's checkpoint: %v", err)
	}
	if got := a.Allocated(); len(got) != 1 {
		t.Fatalf("after Cleanup %v, want only c", got)
	}
}

func TestNewRefusesBadCheckpoints(t *testing.T) {
	for _, tc := range []struct{ name, a, b, want string }{
		{"not JSON", "{", "", "invalid user namespace mappings file"},
		{"uid and gid differ", `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`, "", "should be identical"},
		{"root unmapped", `{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}`, "", "UID 0 must be mapped"},
		{"two pods one range", mappingJSON(65536), mappingJSON(65536), "already taken"},
		{"host root", mappingJSON(0), "", "outside the node's range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, "a", tc.a)
			if tc.b != "" {
				writeCheckpoint(t, dir, "b", tc.b)
			}
			if _, err := userns.New(userns.Config{PodsDir: dir}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestQuickNoOverlap drives random sequences of Get, Release, pod
// directory removal and restarts, and checks that no two pods ever share a
// range, every range is aligned inside the node's range, and a pod keeps
// its range for as long as its checkpoint exists.
func TestQuickNoOverlap(t *testing.T) {
	const slots = 5
	f := func(seed int64) bool {
		rng := rand.New(rand.NewSource(seed))
		dir := t.TempDir()
		cfg := userns.Config{PodsDir: dir, FirstID: 3 * 65536, Length: slots * 65536}
		a, err := userns.New(cfg)
		if err != nil {
			t.Log(err)
			return false
		}
		held := map[types.UID]userns.Mapping{}
		for step := 0; step < 60; step++ {
			uid := types.UID(fmt.Sprintf("pod-%d", rng.Intn(8)))
			switch op := rng.Intn(4); op {
			case 0, 1:
				m, err := a.Get(uid)
				if err != nil {
					if len(held) < slots || !strings.Contains(err.Error(), "empty slot") {
						t.Logf("seed %d step %d: Get(%s) with %d held: %v", seed, step, uid, len(held), err)
						return false
					}
					continue
				}
				if prev, ok := held[uid]; ok && prev != m {
					t.Logf("seed %d: %s moved from %+v to %+v", seed, uid, prev, m)
					return false
				}
				held[uid] = m
			case 2:
				if rng.Intn(2) == 0 {
					_ = a.Release(uid)
				} else {
					_ = os.RemoveAll(filepath.Join(dir, string(uid)))
				}
				delete(held, uid)
			case 3:
				if a, err = userns.New(cfg); err != nil {
					t.Logf("seed %d: restart: %v", seed, err)
					return false
				}
			}
			seen := map[uint32]types.UID{}
			for uid, m := range held {
				if m.Length != 65536 || m.HostID%65536 != 0 || m.HostID < cfg.FirstID || uint64(m.HostID)+uint64(m.Length) > uint64(cfg.FirstID)+uint64(cfg.Length) {
					t.Logf("seed %d: %s has %+v outside the node's range", seed, uid, m)
					return false
				}
				if other, ok := seen[m.HostID]; ok {
					t.Logf("seed %d: %s and %s share %+v", seed, uid, other, m)
					return false
				}
				seen[m.HostID] = uid
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 40}); err != nil {
		t.Fatal(err)
	}
}

func mappingJSON(host uint32) string {
	m := fmt.Sprintf(`[{"hostId":%d,"containerId":0,"length":65536}]`, host)
	return `{"uidMappings":` + m + `,"gidMappings":` + m + `}`
}

func writeCheckpoint(t *testing.T, dir, uid, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, uid), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, uid, userns.FileName), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

package allocation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/ckpt"
)

// TestStoreWritesWhatMarshalWrites: after every change the file holds
// json.Marshal of all records, byte for byte, and upstream's checksum of
// it, though each write encodes only the records that changed.
func TestStoreWritesWhatMarshalWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	q := func(v string) resource.Quantity { return resource.MustParse(v) }
	ten := q("10Mi")
	records := map[types.UID]PodResources{
		"b-uid": {ContainerResources: map[string]v1.ResourceRequirements{
			"app":  {Requests: v1.ResourceList{v1.ResourceCPU: q("100m")}, Limits: v1.ResourceList{v1.ResourceMemory: q("64Mi")}},
			"init": {}}},
		"a<&>\"uid": {ContainerResources: map[string]v1.ResourceRequirements{"c": {}},
			PodLevelResources: &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: q("2")}}},
		"c-uid": {ContainerResources: map[string]v1.ResourceRequirements{}, EmptyDirVolumeLimits: map[string]*resource.Quantity{"v": &ten, "w": nil}},
	}
	check := func(step string) {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(dir, AllocatedFile))
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var f checkpointFile
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		want, err := json.Marshal(checkpointInfo{Entries: s.pods})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(f.Data), want) {
			t.Fatalf("%s: data\n%s\nwant json.Marshal's\n%s", step, f.Data, want)
		}
		if f.Checksum != ckpt.Checksum(string(want)) {
			t.Fatalf("%s: checksum %d, want %d", step, f.Checksum, ckpt.Checksum(string(want)))
		}
	}
	for _, uid := range []types.UID{"b-uid", "a<&>\"uid", "c-uid"} {
		if err := s.Set(uid, records[uid]); err != nil {
			t.Fatal(err)
		}
		check("set " + string(uid))
	}
	if err := s.SetContainer("b-uid", "app", v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q("250m")}}); err != nil {
		t.Fatal(err)
	}
	check("resize of b's app")
	if err := s.SetPodLevel("a<&>\"uid", nil); err != nil {
		t.Fatal(err)
	}
	check("a's pod-level resources removed")
	if err := s.Remove("c-uid"); err != nil {
		t.Fatal(err)
	}
	check("c removed")
	if err := s.RemoveOrphans(map[types.UID]bool{"b-uid": true}); err != nil {
		t.Fatal(err)
	}
	check("a removed as an orphan")
	if err := s.Remove("b-uid"); err != nil {
		t.Fatal(err)
	}
	check("all removed")

	// A reopened store reads it back and writes the same bytes.
	if err := s.Set("d-uid", records["b-uid"]); err != nil {
		t.Fatal(err)
	}
	r, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Set("e-uid", records["c-uid"]); err != nil {
		t.Fatal(err)
	}
	s = r
	check("reopened, one more record")
}

// TestStoreFailedWriteKeepsTheOldRecord: a write that fails leaves the
// store as it was, and the next write holds the old record, encoded right,
// including one read from the file and never written since.
func TestStoreFailedWriteKeepsTheOldRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(cpu string) PodResources {
		return PodResources{ContainerResources: map[string]v1.ResourceRequirements{
			"app": {Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}
	}
	if err := s.Set("a", rec("100m")); err != nil {
		t.Fatal(err)
	}
	r, err := OpenStore(dir, AllocatedFile) // a's record read, not encoded
	if err != nil {
		t.Fatal(err)
	}
	// The checkpoint's path becomes a directory: the rename fails.
	path := filepath.Join(dir, AllocatedFile)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := r.Set("a", rec("200m")); err == nil {
		t.Fatal("Set with an unwritable checkpoint succeeded")
	}
	got, _ := r.Get("a")
	if cpu := got.ContainerResources["app"].Requests[v1.ResourceCPU]; cpu.String() != "100m" {
		t.Fatalf("after the failed write a's CPU is %v, want the old 100m", cpu.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := r.Set("b", rec("300m")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f checkpointFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(checkpointInfo{Entries: r.pods})
	if f.Data != string(want) {
		t.Fatalf("data after the failed write\n%s\nwant\n%s", f.Data, want)
	}
}

// heldWrites makes s's writes wait for release and fail as fail says (by
// the write's number, from 1); writes counts them.
type heldWrites struct {
	release chan struct{}
	fail    func(n int) bool
	mu      sync.Mutex
	writes  int
}

func holdWrites(s *Store, fail func(int) bool) *heldWrites {
	h := &heldWrites{release: make(chan struct{}), fail: fail}
	write := s.write
	s.write = func(path string, data []byte) error {
		h.mu.Lock()
		h.writes++
		n := h.writes
		h.mu.Unlock()
		if n == 1 {
			<-h.release
		}
		if h.fail(n) {
			return errors.New("injected write failure")
		}
		return write(path, data)
	}
	return h
}

// setsDuringAHeldWrite sets pod "first", holds its write until ten more
// Sets have made their changes, then releases it, and returns the ten's
// errors by UID.
func setsDuringAHeldWrite(t *testing.T, s *Store, h *heldWrites) map[types.UID]error {
	t.Helper()
	rec := PodResources{ContainerResources: map[string]v1.ResourceRequirements{"app": {}}}
	firstDone := make(chan error, 1)
	go func() { firstDone <- s.Set("first", rec) }()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[types.UID]error{}
	waitFor := func(seq uint64) {
		for {
			s.mu.Lock()
			n := s.seq
			s.mu.Unlock()
			if n >= seq {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(1)
	for i := range 10 {
		uid := types.UID(fmt.Sprintf("pod-%d", i))
		wg.Go(func() {
			err := s.Set(uid, rec)
			mu.Lock()
			errs[uid] = err
			mu.Unlock()
		})
	}
	waitFor(11)
	close(h.release)
	if err := <-firstDone; err != nil {
		t.Fatalf("first Set: %v", err)
	}
	wg.Wait()
	return errs
}

// TestStoreChangesMadeAtOnceShareAWrite: ten Sets made while a write is
// under way are on disk after one more write, not ten.
func TestStoreChangesMadeAtOnceShareAWrite(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	h := holdWrites(s, func(int) bool { return false })
	for uid, err := range setsDuringAHeldWrite(t, s, h) {
		if err != nil {
			t.Errorf("Set %s: %v", uid, err)
		}
	}
	if h.writes != 2 {
		t.Errorf("%d writes for 11 changes, 10 of them made during the first write; want 2", h.writes)
	}
	r, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.pods) != 11 {
		t.Errorf("the file holds %d records, want 11", len(r.pods))
	}
}

// TestStoreFailedSharedWriteUndoesOnlyItsCaller: when the write the
// waiting changes share fails, the change of the Set that wrote it is
// undone and that Set fails; the other nine write again and succeed.
func TestStoreFailedSharedWriteUndoesOnlyItsCaller(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	h := holdWrites(s, func(n int) bool { return n == 2 })
	var failed []types.UID
	for uid, err := range setsDuringAHeldWrite(t, s, h) {
		if err != nil {
			failed = append(failed, uid)
		}
	}
	if len(failed) != 1 {
		t.Fatalf("Sets failed: %v, want exactly one (the one whose write failed)", failed)
	}
	if _, ok := s.Get(failed[0]); ok {
		t.Errorf("%s's failed change is still recorded", failed[0])
	}
	if h.writes != 3 {
		t.Errorf("%d writes, want 3 (held, failed, the nine others')", h.writes)
	}
	r, err := OpenStore(dir, AllocatedFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.pods) != 10 {
		t.Errorf("the file holds %d records, want 10 (first and the nine)", len(r.pods))
	}
	if _, ok := r.pods[failed[0]]; ok {
		t.Errorf("the file holds %s, whose Set failed", failed[0])
	}
}

package allocation

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

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

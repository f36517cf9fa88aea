package podconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fullCheckpoint has one of everything a checkpoint holds.
func fullCheckpoint() *PodCheckpoint {
	pod := testPod("uid-a", "a", withLabel("app", "a"), withPhase(v1.PodRunning))
	pod.CreationTimestamp = metav1.NewTime(testStart.Truncate(time.Second))
	pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "settings"}, Key: "x"}}}}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c", ContainerID: "containerd://abc", RestartCount: 3,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(testStart.Truncate(time.Second))}}}}
	return &PodCheckpoint{
		NodeName:          "node-a",
		Written:           metav1.NewTime(testStart.Truncate(time.Second)),
		Pods:              []*v1.Pod{pod, testPod("uid-b", "b", inNamespace("other"))},
		ConfigMaps:        []*v1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}, Data: map[string]string{"x": "1"}}},
		Secrets:           []*v1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: "default"}, Data: map[string][]byte{"t": {0, 1, 2, 255}}}},
		Services:          []*v1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1"}}},
		ServiceNamespaces: []string{"default", "other"},
		Node:              &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "edge"}}},
		Tokens: []*CheckpointToken{{Namespace: "default", ServiceAccount: "default", Token: &authenticationv1.TokenRequest{
			Spec:   authenticationv1.TokenRequestSpec{Audiences: []string{"api"}, BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", Name: "a", UID: "uid-a"}},
			Status: authenticationv1.TokenRequestStatus{Token: "eyJ.x.y", ExpirationTimestamp: metav1.NewTime(testStart.Truncate(time.Second))},
		}}},
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	want := fullCheckpoint()
	data, err := EncodeCheckpoint(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCheckpoint(data)
	if err != nil {
		t.Fatalf("decode: %v\n%s", err, data)
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("round trip changed the checkpoint:\ngot  %+v\nwant %+v", got, want)
	}

	// Through a file: atomic, private, nothing left behind.
	dir := t.TempDir()
	path := filepath.Join(dir, "pod_checkpoint")
	if err := WriteCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	if err := WriteCheckpoint(path, want); err != nil {
		t.Fatalf("overwrite: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("mode %v, want 0600: the file holds Secrets", mode)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the checkpoint alone (no temporary files)", len(entries))
	}
	got, err = ReadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatal("the file does not read back as written")
	}
	if _, err := ReadCheckpoint(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestCheckpointCorruption(t *testing.T) {
	good, err := EncodeCheckpoint(fullCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	// The payload starts after `"payload":`.
	payloadAt := bytes.Index(good, []byte(`"payload":`)) + len(`"payload":`)
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	reencode := func(mod func(*checkpointFile)) []byte {
		var f checkpointFile
		if err := json.Unmarshal(good, &f); err != nil {
			t.Fatal(err)
		}
		mod(&f)
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty file", nil, ErrCheckpointCorrupt},
		{"not JSON", []byte("garbage\x00\x01"), ErrCheckpointCorrupt},
		{"truncated", good[:len(good)/2], ErrCheckpointCorrupt},
		{"a bit flipped in the payload", flip(payloadAt + 40), ErrCheckpointCorrupt},
		{"a bit flipped in the checksum", flip(bytes.Index(good, []byte(checksumPrefix)) + len(checksumPrefix) + 3), ErrCheckpointCorrupt},
		{"payload changed and still JSON", reencode(func(f *checkpointFile) {
			f.Payload = bytes.Replace(f.Payload, []byte(`"node-a"`), []byte(`"node-b"`), 1)
		}), ErrCheckpointCorrupt},
		{"no checksum", reencode(func(f *checkpointFile) { f.Checksum = "" }), ErrCheckpointCorrupt},
		{"another checksum algorithm", reencode(func(f *checkpointFile) { f.Checksum = "md5:" + strings.Repeat("0", 32) }), ErrCheckpointCorrupt},
		{"payload of the wrong type", withChecksum(t, []byte(`[1,2]`)), ErrCheckpointCorrupt},
		{"pod without a UID", withChecksum(t, []byte(`{"nodeName":"n","pods":[{"metadata":{"name":"a","namespace":"d"}}]}`)), ErrCheckpointCorrupt},
		{"null pod", withChecksum(t, []byte(`{"nodeName":"n","pods":[null]}`)), ErrCheckpointCorrupt},
		{"token without its request", withChecksum(t, []byte(`{"nodeName":"n","tokens":[{"namespace":"d","serviceAccount":"s"}]}`)), ErrCheckpointCorrupt},
		{"newer version", reencode(func(f *checkpointFile) { f.Version = CheckpointVersion + 1 }), ErrCheckpointVersion},
		{"version 0", reencode(func(f *checkpointFile) { f.Version = 0 }), ErrCheckpointVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeCheckpoint(tc.data)
			if !errors.Is(err, tc.want) || c != nil {
				t.Fatalf("DecodeCheckpoint = %v, %v; want %v", c, err, tc.want)
			}
			path := filepath.Join(t.TempDir(), "pod_checkpoint")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadCheckpoint(path); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadCheckpoint = %v; want %v naming the file", err, tc.want)
			}
		})
	}
}

// withChecksum wraps payload in a current-version envelope with a valid
// checksum.
func withChecksum(t *testing.T, payload []byte) []byte {
	t.Helper()
	data, err := EncodeCheckpoint(&PodCheckpoint{})
	if err != nil {
		t.Fatal(err)
	}
	var f checkpointFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	f.Payload = payload
	f.Checksum = checksumOf(payload)
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzDecodeCheckpoint checks that any input either decodes into a valid
// checkpoint that survives a round trip, or fails with ErrCheckpointCorrupt
// or ErrCheckpointVersion — never a panic.
func FuzzDecodeCheckpoint(f *testing.F) {
	good, err := EncodeCheckpoint(fullCheckpoint())
	if err != nil {
		f.Fatal(err)
	}
	empty, err := EncodeCheckpoint(&PodCheckpoint{NodeName: "n"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(empty)
	f.Add(good[:len(good)-10])
	for _, s := range []string{"", "{}", "null", "[]", `{"version":1}`, `{"version":1,"checksum":"sha256:","payload":null}`, `{"version":2,"payload":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCheckpoint(data)
		if err != nil {
			if !errors.Is(err, ErrCheckpointCorrupt) && !errors.Is(err, ErrCheckpointVersion) {
				t.Fatalf("error %v is neither ErrCheckpointCorrupt nor ErrCheckpointVersion", err)
			}
			if c != nil {
				t.Fatal("a checkpoint with an error")
			}
			return
		}
		if err := validateCheckpoint(c); err != nil {
			t.Fatalf("decoded an invalid checkpoint: %v", err)
		}
		again, err := EncodeCheckpoint(c)
		if err != nil {
			t.Fatalf("a decoded checkpoint does not encode: %v", err)
		}
		c2, err := DecodeCheckpoint(again)
		if err != nil {
			t.Fatalf("a re-encoded checkpoint does not decode: %v", err)
		}
		if !equality.Semantic.DeepEqual(c, c2) {
			t.Fatal("the round trip changed the checkpoint")
		}
	})
}

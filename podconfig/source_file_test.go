package podconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit"
)

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: NAME
spec:
  containers:
  - name: c
    image: IMAGE
`

func manifest(name, image string) string {
	return strings.NewReplacer("NAME", name, "IMAGE", image).Replace(podYAML)
}

// writeAtomic writes a file the way careful tools do: a dotfile, renamed
// into place.
func writeAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func podNames(pods []*v1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

// errorsTo returns an ErrorHandler that forwards to a buffered channel.
func errorsTo() (ErrorHandler, <-chan error) {
	ch := make(chan error, 100)
	return func(_ context.Context, err error) {
		select {
		case ch <- err:
		default:
		}
	}, ch
}

func TestFileSourceScan(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "b.yaml"), manifest("beta", "busybox:1"))
	writeAtomic(t, filepath.Join(dir, "a.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"alpha","namespace":"ns"},"spec":{"containers":[{"name":"c","image":"x"}]}}`)
	writeAtomic(t, filepath.Join(dir, "c.yaml"), string(readTestdata(t, "bad-container-name.yaml")))
	writeAtomic(t, filepath.Join(dir, ".hidden.yaml"), manifest("hidden", "x"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "sub", "d.yaml"), manifest("nested", "x"))

	s := NewFileSource(dir, "Node1", clocktesting.NewFakeClock(testStart))
	pods, err := s.Scan(ctx)
	if got, want := podNames(pods), []string{"ns/alpha-node1", "default/beta-node1"}; !slices.Equal(got, want) {
		t.Errorf("pods = %q, want %q", got, want)
	}
	var me *ManifestError
	if !errors.As(err, &me) || me.Source != filepath.Join(dir, "c.yaml") || !me.HasField("spec.containers[1].name") {
		t.Errorf("error = %v, want a ManifestError for c.yaml naming spec.containers[1].name", err)
	}
	beta := pods[1]
	if beta.Annotations[ConfigSourceAnnotation] != nodekit.SourceFile || beta.Spec.NodeName != "Node1" || len(beta.Spec.Tolerations) != 1 {
		t.Errorf("beta: source %q nodeName %q tolerations %v; want file, Node1, one toleration",
			beta.Annotations[ConfigSourceAnnotation], beta.Spec.NodeName, beta.Spec.Tolerations)
	}

	// A file that turns bad keeps its last good pod; the error names it.
	writeAtomic(t, filepath.Join(dir, "b.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: beta}\nspec: {containers: [{name: c, image: x, bogus: 1}]}\n")
	pods, err = s.Scan(ctx)
	if got := podNames(pods); !slices.Contains(got, "default/beta-node1") {
		t.Errorf("after breaking b.yaml pods = %q, want beta kept", got)
	}
	if err == nil || !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "spec.containers[0].bogus") {
		t.Errorf("after breaking b.yaml error = %v, want b.yaml and spec.containers[0].bogus", err)
	}
	if pods[1].UID != beta.UID {
		t.Errorf("beta UID changed from %s to %s while its file was bad", beta.UID, pods[1].UID)
	}

	// A file that disappears removes its pod.
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	pods, _ = s.Scan(ctx)
	if got, want := podNames(pods), []string{"ns/alpha-node1"}; !slices.Equal(got, want) {
		t.Errorf("after removing b.yaml pods = %q, want %q", got, want)
	}

	// A directory that disappears removes them all.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	pods, err = s.Scan(ctx)
	if len(pods) != 0 || err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("after removing the directory: %q, %v; want no pods and an error", podNames(pods), err)
	}
}

// runSource runs src until the test ends and returns its updates.
func runSource(t *testing.T, src nodekit.Source) <-chan nodekit.PodUpdate {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	out := make(chan nodekit.PodUpdate)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		if err := recv(t, done, "the source to return"); !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
	return out
}

func TestFileSourceRunPeriodic(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(testStart)
	s := NewFileSource(dir, "node1", clk)
	s.noWatch = true // only the 20 s re-read can see changes
	out := runSource(t, s)

	first := recv(t, out, "the first SET")
	if first.Op != nodekit.SET || first.Source != "file" || len(first.Pods) != 0 {
		t.Fatalf("first update = %s from %q with %d pods, want an empty SET from file", first.Op, first.Source, len(first.Pods))
	}

	writeAtomic(t, filepath.Join(dir, "web.yaml"), manifest("web", "nginx:1"))
	clk.Step(DefaultPeriod)
	u := recv(t, out, "the SET after a re-read")
	if got := podNames(u.Pods); !slices.Equal(got, []string{"default/web-node1"}) {
		t.Fatalf("after adding web.yaml: %q", got)
	}

	writeAtomic(t, filepath.Join(dir, "web.yaml"), manifest("web", "nginx:2"))
	clk.Step(DefaultPeriod)
	u2 := recv(t, out, "the SET after a change")
	if len(u2.Pods) != 1 || u2.Pods[0].UID == u.Pods[0].UID || u2.Pods[0].Spec.Containers[0].Image != "nginx:2" {
		t.Fatalf("after changing web.yaml: %+v", podNames(u2.Pods))
	}

	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	clk.Step(DefaultPeriod)
	if u := recv(t, out, "the SET after a removal"); len(u.Pods) != 0 {
		t.Fatalf("after removing web.yaml: %q", podNames(u.Pods))
	}
}

func TestFileSourceRunInotify(t *testing.T) {
	dir := t.TempDir()
	onError, errs := errorsTo()
	// The fake clock never moves: only inotify can report changes.
	s := NewFileSource(dir, "node1", clocktesting.NewFakeClock(testStart), WithErrorHandler(onError))
	out := runSource(t, s)
	recv(t, out, "the first SET")

	writeAtomic(t, filepath.Join(dir, "web.yaml"), manifest("web", "nginx:1"))
	if u := recv(t, out, "the SET after a create"); !slices.Equal(podNames(u.Pods), []string{"default/web-node1"}) {
		t.Fatalf("after creating web.yaml: %q", podNames(u.Pods))
	}

	// A bad file is reported with its path and field and does not stop the
	// others: a good file written after it still arrives.
	bad := filepath.Join(dir, "bad.yaml")
	writeAtomic(t, bad, string(readTestdata(t, "bad-duplicate-volume.yaml")))
	err := recv(t, errs, "the error for bad.yaml")
	var me *ManifestError
	if !errors.As(err, &me) || me.Source != bad || !me.HasField("spec.volumes[1].name") {
		t.Fatalf("error = %v, want bad.yaml's spec.volumes[1].name", err)
	}
	writeAtomic(t, filepath.Join(dir, "db.yaml"), manifest("db", "postgres:16"))
	if u := recv(t, out, "the SET after a second create"); !slices.Equal(podNames(u.Pods), []string{"default/db-node1", "default/web-node1"}) {
		t.Fatalf("after creating db.yaml: %q", podNames(u.Pods))
	}

	// Written in place (not renamed), the change still arrives.
	if err := os.WriteFile(filepath.Join(dir, "db.yaml"), []byte(manifest("db", "postgres:17")), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		u := recv(t, out, "the SET after an in-place write")
		if len(u.Pods) == 2 && u.Pods[0].Spec.Containers[0].Image == "postgres:17" {
			break
		}
	}

	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	if u := recv(t, out, "the SET after a remove"); !slices.Equal(podNames(u.Pods), []string{"default/db-node1"}) {
		t.Fatalf("after removing web.yaml: %q", podNames(u.Pods))
	}
}

func TestFileSourceRunRejectsBadConfig(t *testing.T) {
	clk := clocktesting.NewFakeClock(testStart)
	for name, s := range map[string]*FileSource{
		"no dir":   NewFileSource("", "n", clk),
		"no node":  NewFileSource(t.TempDir(), "", clk),
		"no clock": NewFileSource(t.TempDir(), "n", nil),
	} {
		if err := s.Run(testContext(t), make(chan nodekit.PodUpdate)); err == nil {
			t.Errorf("%s: Run = nil, want an error", name)
		}
	}
}

func TestFileSourceSingleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "web.yaml")
	writeAtomic(t, path, manifest("web", "nginx:1"))
	s := NewFileSource(path, "n1", clocktesting.NewFakeClock(testStart))
	pods, err := s.Scan(testContext(t))
	if err != nil || !slices.Equal(podNames(pods), []string{"default/web-n1"}) {
		t.Fatalf("Scan of a single file = %q, %v", podNames(pods), err)
	}

	out := runSource(t, s)
	recv(t, out, "the first SET")
	writeAtomic(t, path, manifest("web", "nginx:2"))
	for {
		u := recv(t, out, "the SET after replacing the file")
		if len(u.Pods) == 1 && u.Pods[0].Spec.Containers[0].Image == "nginx:2" {
			break
		}
	}
}

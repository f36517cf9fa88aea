package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nodekit/nodekit/internal/itest"
)

func TestPkgOf(t *testing.T) {
	for name, want := range map[string]string{
		"k8s.io/api/core/v1.(*Pod).Unmarshal":                             "k8s.io/api/core/v1",
		"*k8s.io/api/core/v1.Pod":                                         "k8s.io/api/core/v1",
		"[]k8s.io/api/core/v1.Container":                                  "k8s.io/api/core/v1",
		"[4]k8s.io/api/core/v1.Container":                                 "k8s.io/api/core/v1",
		"chan k8s.io/apimachinery/pkg/watch.Event":                        "k8s.io/apimachinery/pkg/watch",
		"go:itab.*k8s.io/cri-client/pkg.remoteRuntimeService,io.Closer":   "k8s.io/cri-client/pkg",
		"type:.eq.go.opentelemetry.io/otel/attribute.KeyValue":            "go.opentelemetry.io/otel/attribute",
		"k8s.io/apimachinery/pkg/util/sets.Set[go.shape.string].Insert":   "k8s.io/apimachinery/pkg/util/sets",
		"runtime.mallocgc":                                                "runtime",
		"main.main":                                                       "main",
		"map[string]int":                                                  "(map types)",
		"struct { a int }":                                                "(struct types)",
		"func(int) error":                                                 "(func types)",
		"uint8":                                                           "(builtin types)",
		"github.com/nodekit/nodekit/statusmgr.(*Manager).sync.func1":      "github.com/nodekit/nodekit/statusmgr",
		"gopkg.in/yaml%2ev3.(*decoder).unmarshal":                         "gopkg.in/yaml.v3",
		"google.golang.org/grpc/internal/transport.(*http2Client).reader": "google.golang.org/grpc/internal/transport",
	} {
		if got := pkgOf(name); got != want {
			t.Errorf("pkgOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestDisjointAndOverlapping(t *testing.T) {
	ss := disjoint([]span{{10, 20, "b", ""}, {0, 12, "a", ""}, {20, 30, "c", ""}, {22, 25, "inside c", ""}})
	if len(ss) != 3 || ss[0].owner != "a" || ss[1].start != 12 || ss[1].owner != "b" || ss[2].owner != "c" {
		t.Fatalf("disjoint = %+v, want a [0,12), b [12,20), c [20,30)", ss)
	}
	if got := overlapping(ss, 15, 21); len(got) != 2 || got[0].owner != "b" || got[1].owner != "c" {
		t.Errorf("overlapping [15,21) = %+v, want b and c", got)
	}
	if got := overlapping(ss, 30, 40); len(got) != 0 {
		t.Errorf("overlapping [30,40) = %+v, want none", got)
	}
	ext := extendToNext([]span{{start: 50}, {start: 10}, {start: 10}, {start: 30}}, 60)
	if len(ext) != 3 || ext[0].end != 30 || ext[1].end != 50 || ext[2].end != 60 {
		t.Errorf("extendToNext = %+v", ext)
	}
}

// A Go binary's layout (the bench itself, built with symbols: test
// binaries have none): every byte of its loaded sections is charged once
// when every page counts, and type descriptors and pclntab entries are
// charged to packages. The pagemap side runs in every bench --residency.
func TestLayoutOfABinary(t *testing.T) {
	itest.Short(t, "a build of the bench binary")
	bin := filepath.Join(t.TempDir(), "bench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := loadLayout(bin)
	if err != nil {
		t.Fatal(err)
	}
	all, err := measureResidency(0, l)
	if err != nil {
		t.Fatal(err)
	}
	var size, charged, typed uint64
	for _, s := range l.sections {
		size += s.end - s.start
	}
	for pkg, n := range all.byPkg {
		charged += n
		typed += all.byPkgKind[pkg]["types"]
	}
	if charged != size {
		t.Errorf("bytes charged with every page counted = %d, want the sections' %d", charged, size)
	}
	if typed < 100<<10 || all.byPkgKind["runtime"]["pclntab"] == 0 || all.byPkgKind["main"]["text"] == 0 {
		t.Errorf("type descriptors %d bytes, runtime pclntab %d, main's text %d: want all attributed", typed,
			all.byPkgKind["runtime"]["pclntab"], all.byPkgKind["main"]["text"])
	}
	if l.moduleOf("k8s.io/api/core/v1") != "k8s.io/api" || l.moduleOf("net/http") != "std:net" {
		t.Errorf("modules: %q, %q", l.moduleOf("k8s.io/api/core/v1"), l.moduleOf("net/http"))
	}
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/kubeletconfig"
)

// leafPaths walks t by reflection: the JSON path of every field, structs
// of the kubelet API (and logging) walked into.
func leafPaths(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous || name == "" || name == "-" {
			continue // TypeMeta
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && walkedStruct(ft) && ft != reflect.TypeOf(metav1.Duration{}) {
			out = append(out, leafPaths(ft, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

func TestFieldsAccounted(t *testing.T) {
	table := map[string]configField{}
	for _, f := range configFields() {
		if _, dup := table[f.Path]; dup {
			t.Errorf("%s: accounted twice", f.Path)
		}
		if f.Class < actedOn || f.Class > noEffect || f.Where == "" {
			t.Errorf("%s: class %v, where %q: want a class and where/why", f.Path, f.Class, f.Where)
		}
		table[f.Path] = f
	}
	walked := leafPaths(reflect.TypeOf(kubeletv1beta1.KubeletConfiguration{}), "")
	for _, p := range walked {
		if _, ok := table[p]; !ok {
			t.Errorf("KubeletConfiguration field %s is not accounted for in configFields (fields.go)", p)
		}
		delete(table, p)
	}
	for p := range table {
		t.Errorf("configFields has %s, which is not a field of KubeletConfiguration", p)
	}
	if len(walked) < 130 {
		t.Fatalf("the walk found %d fields; it is broken", len(walked))
	}
}

// reach is the field at path in v (a struct), allocating nil pointers on
// the way.
func reach(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		sf, ok := fieldByJSON(v.Type(), name)
		if !ok {
			panic("no field " + name + " in " + path)
		}
		v = v.FieldByIndex(sf.Index)
	}
	return v
}

// perturb sets v to a value other than the one it holds.
func perturb(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		perturb(v.Elem())
	case reflect.String:
		v.SetString(v.String() + "-not-the-default")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 7)
	case reflect.Float64:
		v.SetFloat(v.Float() / 2)
	case reflect.Slice:
		e := reflect.New(v.Type().Elem()).Elem()
		perturb(e)
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		perturb(k)
		perturb(e)
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if d, ok := v.Addr().Interface().(*metav1.Duration); ok {
			d.Duration += time.Second
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() && v.Field(i).CanSet() {
				perturb(v.Field(i))
				return
			}
		}
	}
}

// TestFieldRefusedUnlessDefault sets every field of the "refused unless
// default" class away from its default and expects the start-up check to
// name it; every "acted on" and "no effect" field changed must pass.
func TestFieldRefusedUnlessDefault(t *testing.T) {
	for _, f := range configFields() {
		cfg := &kubeletv1beta1.KubeletConfiguration{}
		if err := kubeletconfig.SetDefaults(cfg); err != nil {
			t.Fatal(err)
		}
		if f.Path == "featureGates" {
			continue // checked against the gate list: TestConfigRefused
		}
		v := reach(reflect.ValueOf(cfg).Elem(), f.Path)
		perturb(v)
		err := checkRefusedFields(cfg)
		if f.Also != "" && serialized(v, true) == f.Also {
			// The one other value of a bool, which nodekit accepts.
			if err != nil {
				t.Errorf("%s set to %s (accepted): refused: %v", f.Path, f.Also, err)
			}
			continue
		}
		switch {
		case f.Class == refusedUnlessDefault && (err == nil || !strings.Contains(err.Error(), f.Path+":")):
			t.Errorf("%s set to %s: got %v, want a start-up error naming it", f.Path, show(v, true), err)
		case f.Class != refusedUnlessDefault && err != nil:
			t.Errorf("%s (%s) set: refused: %v", f.Path, f.Class, err)
		}
	}
}

// fieldsTable is the README's table of every configuration field.
func fieldsTable() string {
	var b bytes.Buffer
	rows := configFields()
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Class < rows[j].Class })
	count := map[fieldClass]int{}
	for _, r := range rows {
		count[r.Class]++
	}
	fmt.Fprintf(&b, "%d fields: %d acted on, %d refused unless default, %d accepted with no effect by design.\n\n",
		len(rows), count[actedOn], count[refusedUnlessDefault], count[noEffect])
	b.WriteString("| field | status | where / why |\n|---|---|---|\n")
	for _, r := range rows {
		status := r.Class.String()
		if r.Also != "" {
			status += " (or `" + r.Also + "`)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Path, status, strings.ReplaceAll(r.Where, "|", "\\|"))
	}
	return b.String()
}

const (
	readmeBegin = "<!-- BEGIN configuration fields: generated from examples/fullagent/fields.go by `go generate ./examples/fullagent` -->\n"
	readmeEnd   = "<!-- END configuration fields -->"
)

//go:generate env NODEKIT_UPDATE_README=1 go test -count=1 -run ^TestFieldsReadme$ .

// TestFieldsReadme checks that README.md's table is the one fields.go
// gives (NODEKIT_UPDATE_README=1 rewrites it).
func TestFieldsReadme(t *testing.T) {
	const path = "../../README.md"
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q ... %q section", strings.TrimSpace(readmeBegin), readmeEnd)
	}
	want := s[:i+len(readmeBegin)] + fieldsTable() + s[j:]
	if want == s {
		return
	}
	if os.Getenv("NODEKIT_UPDATE_README") == "1" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("README.md's configuration table differs from fields.go: run go generate ./examples/fullagent")
}

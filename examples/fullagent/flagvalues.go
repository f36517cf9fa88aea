package main

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// pflag values for the KubeletConfiguration's pointer and map fields, with
// kubelet's flag semantics: a map or list flag replaces the file's value
// on its first use and accumulates over repeated uses.

type boolPtr struct{ p **bool }

func (v boolPtr) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*v.p = &b
	return nil
}
func (v boolPtr) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return strconv.FormatBool(**v.p)
}
func (boolPtr) Type() string { return "bool" }

type int32Ptr struct{ p **int32 }

func (v int32Ptr) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 32)
	if err != nil {
		return err
	}
	i := int32(n)
	*v.p = &i
	return nil
}
func (v int32Ptr) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return strconv.Itoa(int(**v.p))
}
func (int32Ptr) Type() string { return "int32" }

type int64Ptr struct{ p **int64 }

func (v int64Ptr) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return err
	}
	*v.p = &n
	return nil
}
func (v int64Ptr) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return strconv.FormatInt(**v.p, 10)
}
func (int64Ptr) Type() string { return "int64" }

type stringPtr struct{ p **string }

func (v stringPtr) Set(s string) error { *v.p = &s; return nil }
func (v stringPtr) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return **v.p
}
func (stringPtr) Type() string { return "string" }

type durationPtr struct{ p **metav1.Duration }

func (v durationPtr) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.p = &metav1.Duration{Duration: d}
	return nil
}
func (v durationPtr) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return (*v.p).Duration.String()
}
func (durationPtr) Type() string { return "duration" }

// ipString is an IP address flag bound to a string field.
type ipString struct{ p *string }

func (v ipString) Set(s string) error {
	if net.ParseIP(strings.TrimSpace(s)) == nil {
		return fmt.Errorf("%q is not a valid IP address", s)
	}
	*v.p = strings.TrimSpace(s)
	return nil
}
func (v ipString) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (ipString) Type() string { return "ip" }

// stringMap is key=value,key=value (sep "=") or key<value,... (sep "<",
// eviction thresholds); split false takes one pair per use.
type stringMap struct {
	m     *map[string]string
	sep   string
	split bool
	used  bool
}

func (v *stringMap) Set(s string) error {
	if !v.used || *v.m == nil {
		*v.m = map[string]string{}
		v.used = true
	}
	pairs := []string{s}
	if v.split {
		pairs = strings.Split(s, ",")
	}
	for _, kv := range pairs {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, v.sep)
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not key%svalue", kv, v.sep)
		}
		(*v.m)[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return nil
}
func (v *stringMap) String() string {
	if v.m == nil {
		return ""
	}
	var out []string
	for k, val := range *v.m {
		out = append(out, k+v.sep+val)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
func (*stringMap) Type() string { return "mapStringString" }

// headerMap is --manifest-url-header: name:value,name:value; repeated
// names add values.
type headerMap struct {
	m    *map[string][]string
	used bool
}

func (v *headerMap) Set(s string) error {
	if !v.used || *v.m == nil {
		*v.m = map[string][]string{}
		v.used = true
	}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not name:value", kv)
		}
		k = strings.TrimSpace(k)
		(*v.m)[k] = append((*v.m)[k], strings.TrimSpace(val))
	}
	return nil
}
func (v *headerMap) String() string {
	if v.m == nil {
		return ""
	}
	return fmt.Sprint(*v.m)
}
func (*headerMap) Type() string { return "colonSeparatedMultimapStringString" }

// gateMap is --feature-gates: Name=bool,...; merged over the file's gates
// (a gate named on the command line wins), as kubelet.
type gateMap struct{ m *map[string]bool }

func (v gateMap) Set(s string) error {
	if *v.m == nil {
		*v.m = map[string]bool{}
	}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q is not Name=true|false", kv)
		}
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return fmt.Errorf("feature gate %s: %w", k, err)
		}
		(*v.m)[strings.TrimSpace(k)] = b
	}
	return nil
}
func (v gateMap) String() string {
	if v.m == nil {
		return ""
	}
	var out []string
	for k, b := range *v.m {
		out = append(out, fmt.Sprintf("%s=%v", k, b))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
func (gateMap) Type() string { return "mapStringBool" }

// taintList is --register-with-taints: key=value:Effect,...
type taintList struct {
	t    *[]v1.Taint
	used bool
}

func (v *taintList) Set(s string) error {
	if !v.used {
		*v.t, v.used = nil, true
	}
	for _, spec := range strings.Split(s, ",") {
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return fmt.Errorf("taint %q has no :Effect", spec)
		}
		k, val, _ := strings.Cut(kv, "=")
		taint := v1.Taint{Key: k, Value: val, Effect: v1.TaintEffect(effect)}
		if err := validTaint(taint); err != nil {
			return err
		}
		*v.t = append(*v.t, taint)
	}
	return nil
}
func (v *taintList) String() string {
	if v.t == nil {
		return ""
	}
	return fmt.Sprint(*v.t)
}
func (*taintList) Type() string { return "[]<key>=<value>:<effect>" }

// reservedMemory is --reserved-memory: NUMA:name=quantity,name=quantity;
// repeated for more NUMA nodes.
type reservedMemory struct {
	r    *[]kubeletv1beta1.MemoryReservation
	used bool
}

func (v *reservedMemory) Set(s string) error {
	if !v.used {
		*v.r, v.used = nil, true
	}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		node, list, ok := strings.Cut(part, ":")
		n, err := strconv.ParseInt(strings.TrimSpace(node), 10, 32)
		if !ok || err != nil {
			return fmt.Errorf("%q is not NUMA-node:name=quantity,...", part) //nolint:staticcheck // the trailing ",..." is the syntax
		}
		limits := v1.ResourceList{}
		for _, kv := range strings.Split(list, ",") {
			name, q, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%q is not name=quantity", kv)
			}
			qty, err := resource.ParseQuantity(strings.TrimSpace(q))
			if err != nil {
				return fmt.Errorf("%s: %w", kv, err)
			}
			limits[v1.ResourceName(strings.TrimSpace(name))] = qty
		}
		*v.r = append(*v.r, kubeletv1beta1.MemoryReservation{NumaNode: int32(n), Limits: limits})
	}
	return nil
}
func (v *reservedMemory) String() string {
	if v.r == nil {
		return ""
	}
	return fmt.Sprint(*v.r)
}
func (*reservedMemory) Type() string { return "reservedMemory" }

var (
	_ pflag.Value = boolPtr{}
	_ pflag.Value = int32Ptr{}
	_ pflag.Value = int64Ptr{}
	_ pflag.Value = stringPtr{}
	_ pflag.Value = durationPtr{}
	_ pflag.Value = ipString{}
	_ pflag.Value = (*stringMap)(nil)
	_ pflag.Value = (*headerMap)(nil)
	_ pflag.Value = gateMap{}
	_ pflag.Value = (*taintList)(nil)
	_ pflag.Value = (*reservedMemory)(nil)
)

package credentialprovider

import (
	"reflect"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, image string
		want           bool
	}{
		{"*.dkr.ecr.*.amazonaws.com", "123.dkr.ecr.us-east-1.amazonaws.com/app", true},
		{"*.dkr.ecr.*.amazonaws.com", "dkr.ecr.us-east-1.amazonaws.com/app", false},
		{"*.example.com", "a.example.com/x", true},
		{"*.example.com", "example.com/x", false},
		{"*.example.com", "a.b.example.com/x", false},
		{"*.*.example.com", "a.b.example.com/x", true},
		{"example.com", "example.com/any/path", true},
		{"example.com/team", "example.com/team/app", true},
		{"example.com/team", "example.com/other/app", false},
		{"example.com:5000", "example.com:5000/app", true},
		{"example.com:5000", "example.com/app", false},
		{"example.com", "example.com:5000/app", false},
		{"registry.io", "registry.io", true},
		{"%bad", "registry.io", false},
	}
	for _, tc := range tests {
		if got := Match(tc.pattern, tc.image); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.image, got, tc.want)
		}
	}
}

func TestLookupOrder(t *testing.T) {
	a, b, c, hub := Credential{Username: "a"}, Credential{Username: "b"}, Credential{Username: "c"}, Credential{Username: "hub"}
	configs := []map[string]Credential{
		{"https://example.com": a, "example.com/team/": b, "other.io": c},
		{"http://example.com/v2/": c, "index.docker.io": hub},
	}
	// Longer keys first (reverse lexical), a key's providers in order;
	// the scheme and the /v2/ prefix do not count.
	if got, want := lookup(configs, "example.com/team/app"), []Credential{b, a, c}; !reflect.DeepEqual(got, want) {
		t.Errorf("lookup = %v, want %v", got, want)
	}
	if got := lookup(configs, "unknown.io/app"); len(got) != 0 {
		t.Errorf("lookup of an unmatched registry = %v", got)
	}
	if got, want := lookup(configs, "docker.io/library/busybox"), []Credential{hub}; !reflect.DeepEqual(got, want) {
		t.Errorf("Docker Hub image: lookup = %v, want %v", got, want)
	}
}

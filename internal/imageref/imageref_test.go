package imageref

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// grammar is the reference grammar as one regular expression (the form
// the agent used before this package); submatches 1 and 2 are the tag
// and the digest.
var grammar = regexp.MustCompile(`^(?:` +
	`(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?` +
	`/)?` + `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*` + `(?:/` + `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*` + `)*` +
	`(?::([\w][\w.-]{0,127}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$`)

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var cases = []string{
	"busybox", "busybox:1.37", "library/busybox:latest", "docker.io/library/busybox",
	"registry:5000/ns/app:1.0", "registry.example.com:5000/a/b/c@sha256:" + hex64,
	"app:v1@sha256:" + hex64, "localhost:5000", "localhost:5000/app", "[::1]:5000/app:tag",
	"[fe80::1]/app", "[::1]", "[::1]:5000", "[zz]/app", "[::1/app", "[::1]x/app",
	"a.b_c__d-e---f", "a___b", "a..b", "a_.b", "-a", "a-", "a/", "/a", "a//b", "",
	"Upper", "Upper.example.com/app", "host-/app", "-host/app", "host.-x/app", "h:/app", "h:x/app",
	"app:", "app:.x", "app:_x", "app:" + strings.Repeat("t", 128), "app:" + strings.Repeat("t", 129),
	"app@sha256:" + hex64[:31], "app@sha256:" + hex64[:32], "app@sha256:" + hex64 + "g",
	"app@sha256+b64.x-y_z:" + hex64, "app@1sha:" + hex64, "app@sha--256:" + hex64, "app@:" + hex64,
	"app@sha256:" + hex64 + "@x", "app:tag:tag", "a:1/b:2", "a:1/b", "a/b:c/d", "app@", "@sha256:" + hex64,
	"reg.io/ns/app:1.0.0-rc_1", "xn--bcher-kva.example/app", "a.b.c:80/x.y/z",
}

// Parse accepts exactly what the grammar's expression accepts, and gives
// the same tag and digest and the reference without them as the name.
func TestParseMatchesGrammar(t *testing.T) {
	for _, ref := range cases {
		check(t, ref)
	}
}

func FuzzParseMatchesGrammar(f *testing.F) {
	for _, ref := range cases {
		f.Add(ref)
	}
	f.Fuzz(check)
}

func check(t *testing.T, ref string) {
	m := grammar.FindStringSubmatch(ref)
	r, err := Parse(ref)
	if (m == nil) != (err != nil) {
		t.Fatalf("Parse(%q) = %+v, %v; the grammar matches: %v", ref, r, err, m != nil)
	}
	if m == nil {
		if want := fmt.Sprintf("invalid image name %q", ref); err.Error() != want {
			t.Errorf("Parse(%q) error %q, want %q", ref, err, want)
		}
		return
	}
	name := ref
	if m[2] != "" {
		name = strings.TrimSuffix(name, "@"+m[2])
	}
	if m[1] != "" {
		name = strings.TrimSuffix(name, ":"+m[1])
	}
	if r.Tag != m[1] || r.Digest != m[2] || r.Name != name {
		t.Errorf("Parse(%q) = %+v, want tag %q digest %q name %q", ref, r, m[1], m[2], name)
	}
}

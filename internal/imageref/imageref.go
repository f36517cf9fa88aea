package imageref

import (
	"fmt"
	"strings"
)

// Ref is a valid reference's parts: Name is the reference without its
// tag and digest ("registry:5000/ns/app" of
// "registry:5000/ns/app:1.0@sha256:..."); Tag and Digest are empty when
// absent.
type Ref struct {
	Name, Tag, Digest string
}

// maxTag is the longest tag the grammar accepts.
const maxTag = 128

// Parse splits ref, or says that it is not a valid image reference.
func Parse(ref string) (Ref, error) {
	var r Ref
	rest := ref
	if name, digest, ok := strings.Cut(rest, "@"); ok {
		if !validDigest(digest) {
			return Ref{}, invalid(ref)
		}
		rest, r.Digest = name, digest
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i+1:], "/") {
		if !validTag(rest[i+1:]) {
			return Ref{}, invalid(ref)
		}
		rest, r.Tag = rest[:i], rest[i+1:]
	}
	if !validName(rest) {
		return Ref{}, invalid(ref)
	}
	r.Name = rest
	return r, nil
}

func invalid(ref string) error {
	return fmt.Errorf("invalid image name %q", ref)
}

// validName: [domain/]component(/component)*, where the first of two or
// more segments may be a domain or a component.
func validName(name string) bool {
	first, rest, more := strings.Cut(name, "/")
	if !more {
		return validComponent(first)
	}
	if !validDomain(first) && !validComponent(first) {
		return false
	}
	for _, c := range strings.Split(rest, "/") {
		if !validComponent(c) {
			return false
		}
	}
	return true
}

// validComponent: runs of [a-z0-9] joined by ".", "_", "__" or one or
// more "-".
func validComponent(c string) bool {
	i := 0
	for {
		run := i
		for i < len(c) && lowerAlnum(c[i]) {
			i++
		}
		if i == run {
			return false // empty, or a separator at the start, end or twice
		}
		if i == len(c) {
			return true
		}
		switch {
		case c[i] == '.':
			i++
		case strings.HasPrefix(c[i:], "__"):
			i += 2
		case c[i] == '_':
			i++
		case c[i] == '-':
			for i < len(c) && c[i] == '-' {
				i++
			}
		default:
			return false
		}
	}
}

// validDomain: host[:port], host being dot-separated labels of letters,
// digits and inner hyphens, or an IPv6 address in brackets.
func validDomain(d string) bool {
	port := ""
	if strings.HasPrefix(d, "[") {
		end := strings.IndexByte(d, ']')
		if end < 0 || !validIPv6(d[1:end]) {
			return false
		}
		port = d[end+1:]
	} else {
		host := d
		if i := strings.IndexByte(d, ':'); i >= 0 {
			host, port = d[:i], d[i:]
		}
		for _, label := range strings.Split(host, ".") {
			if !validLabel(label) {
				return false
			}
		}
	}
	if port == "" {
		return true
	}
	return port[0] == ':' && len(port) > 1 && allOf(port[1:], digit)
}

func validIPv6(s string) bool {
	return s != "" && allOf(s, func(b byte) bool { return hexDigit(b) || b == ':' })
}

func validLabel(l string) bool {
	if l == "" || !alnum(l[0]) || !alnum(l[len(l)-1]) {
		return false
	}
	return allOf(l, func(b byte) bool { return alnum(b) || b == '-' })
}

// validTag: a word character, then up to 127 word characters, dots and
// hyphens.
func validTag(t string) bool {
	if t == "" || len(t) > maxTag || !word(t[0]) {
		return false
	}
	return allOf(t, func(b byte) bool { return word(b) || b == '.' || b == '-' })
}

// validDigest: algorithm:hex, the algorithm letter-led components joined
// by one of "-_+.", the hex at least 32 digits.
func validDigest(d string) bool {
	algo, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) < 32 || !allOf(hex, hexDigit) {
		return false
	}
	for i := 0; ; {
		if i >= len(algo) || !letter(algo[i]) {
			return false
		}
		for i++; i < len(algo) && alnum(algo[i]); i++ {
		}
		if i == len(algo) {
			return true
		}
		if !strings.ContainsRune("-_+.", rune(algo[i])) {
			return false
		}
		i++
	}
}

func allOf(s string, ok func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

func digit(b byte) bool      { return '0' <= b && b <= '9' }
func letter(b byte) bool     { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }
func alnum(b byte) bool      { return letter(b) || digit(b) }
func lowerAlnum(b byte) bool { return 'a' <= b && b <= 'z' || digit(b) }
func word(b byte) bool       { return alnum(b) || b == '_' }
func hexDigit(b byte) bool {
	return digit(b) || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

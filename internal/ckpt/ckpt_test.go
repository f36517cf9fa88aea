package ckpt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/utils/dump"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "memory_manager_state")
	if data, found, err := Read(path); err != nil || found || data != nil {
		t.Fatalf("missing file: data=%q found=%t err=%v", data, found, err)
	}
	if err := os.WriteFile(path, []byte(`{"checksum":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, found, err := Read(path); err != nil || !found || !bytes.Equal(data, []byte(`{"checksum":1}`)) {
		t.Fatalf("present file: data=%q found=%t err=%v", data, found, err)
	}
	// A directory where the file should be is not "missing".
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	_, found, err := Read(sub)
	if !errors.Is(err, syscall.EISDIR) || found || !strings.Contains(err.Error(), sub) {
		t.Fatalf("directory: found=%t err=%v, want EISDIR naming %s", found, err, sub)
	}
}

func TestChecksum(t *testing.T) {
	type data struct {
		PolicyName string
		Entries    map[string]string
	}
	// The printings below are dump.ForHash's (type names included, map
	// keys sorted); the hash is checked against FNV-1a written out here.
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{name: "string", v: "abc", want: `(string)abc`},
		{name: "struct", v: data{PolicyName: "none", Entries: map[string]string{"b": "2", "a": "1"}},
			want: `(ckpt.data){PolicyName:(string)none Entries:(map[string]string)map[a:1 b:2]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := Checksum(tc.v), fnv32a(tc.want); got != want {
				t.Fatalf("Checksum = %d, want FNV-32a(%s) = %d", got, tc.want, want)
			}
		})
	}
	if Checksum("abc") == Checksum("abd") {
		t.Fatal("different values share a checksum")
	}
}

// TestChecksumOfStringsAsPrinted: the string path gives what the printing
// gives, for strings a checkpoint's JSON holds and for any bytes.
func TestChecksumOfStringsAsPrinted(t *testing.T) {
	for _, s := range []string{"", "abc", `{"entries":{"u1":{"a":"b\"c"}}}`, "a\"b\n\\c", "é€\x00\xff\t",
		strings.Repeat(`{"k":"v"},`, 5000)} {
		if got, want := Checksum(s), ChecksumPrinted(dump.ForHash(s)); got != want {
			t.Errorf("Checksum(%.40q) = %d, the printing's checksum is %d", s, got, want)
		}
	}
}

// fnv32a is the reference FNV-1a 32-bit hash, written out from its
// definition to check ChecksumPrinted against.
func fnv32a(s string) uint64 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return uint64(h)
}

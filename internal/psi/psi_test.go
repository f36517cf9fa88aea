package psi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse(strings.NewReader("some avg10=1.50 avg60=0.75 avg300=0.25 total=7000000\nfull avg10=0.10 avg60=0.20 avg300=0.30 total=42\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Some: Data{Avg10: 1.5, Avg60: 0.75, Avg300: 0.25, Total: 7_000_000},
		Full: Data{Avg10: 0.1, Avg60: 0.2, Avg300: 0.3, Total: 42}}
	if got != want {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
}

// A malformed file is an error; what could be read is still returned.
func TestReadFileMalformed(t *testing.T) {
	p := filepath.Join(t.TempDir(), CPUFile)
	if err := os.WriteFile(p, []byte("some avg10=x total=12 extra\nbogus total=99\nfull avg300=2.5 total=-3\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(p)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("ReadFile error = %v, want one naming %s", err, p)
	}
	for _, frag := range []string{`invalid avg10 "x"`, `invalid field "extra"`, `invalid total "-3"`} {
		if err != nil && !strings.Contains(err.Error(), frag) {
			t.Errorf("error %q lacks %q", err, frag)
		}
	}
	if got.Some.Total != 12 || got.Some.Avg10 != 0 || got.Full.Total != 0 || got.Full.Avg300 != 2.5 {
		t.Errorf("ReadFile = %+v", got)
	}
}

func TestReadFileMissing(t *testing.T) {
	got, err := ReadFile(filepath.Join(t.TempDir(), "missing"))
	if err != nil || got != (Stats{}) {
		t.Errorf("missing file: %+v, %v; want zeros and no error", got, err)
	}
}

func TestEnabled(t *testing.T) {
	d := t.TempDir()
	if Enabled(d) {
		t.Error("Enabled without cpu.pressure")
	}
	if err := os.WriteFile(filepath.Join(d, CPUFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !Enabled(d) {
		t.Error("not Enabled with cpu.pressure")
	}
}

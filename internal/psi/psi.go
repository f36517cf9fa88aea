// Package psi reads the pressure stall information of cgroup v2: the
// cpu.pressure, memory.pressure and io.pressure files of a cgroup. It is
// shared by containermetrics (the /metrics/cadvisor pressure series) and
// stats (the Summary API's psi blocks).
package psi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Data is one line ("some" or "full") of a pressure file: the stall
// averages in percent over 10, 60 and 300 seconds and the total stall
// time in microseconds, as the kernel writes it.
type Data struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64
}

// Stats is a cgroup's pressure of one resource: Some is the time at
// least one task waited, Full the time all non-idle tasks were stalled
// at once.
type Stats struct{ Some, Full Data }

// Files are the pressure files of cgroup v2, by resource.
const (
	CPUFile    = "cpu.pressure"
	MemoryFile = "memory.pressure"
	IOFile     = "io.pressure"
)

// Enabled tells whether the unified hierarchy mounted at root has
// pressure files, as kubelet decides whether PSI is available: the root
// cgroup's cpu.pressure exists (cgroup v2 with CONFIG_PSI, not booted
// with psi=0).
func Enabled(root string) bool {
	_, err := os.Stat(filepath.Join(root, CPUFile))
	return err == nil
}

// ReadFile reads a pressure file. A missing file gives zeros and no
// error, as runc's cgroup library reads it (a kernel without PSI, or
// pressure turned off for the cgroup). Other failures and malformed
// content give an error naming the file, with every field that could be
// read.
func ReadFile(path string) (Stats, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Stats{}, nil
	}
	if err != nil {
		return Stats{}, fmt.Errorf("psi: %w", err)
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return s, fmt.Errorf("psi: %s: %w", path, err)
	}
	return s, nil
}

// Parse reads "some avg10=0.00 avg60=0.00 avg300=0.00 total=0" and the
// same "full" line. Lines of another kind and unknown keys are ignored;
// a field without "=" or with a value that does not parse is an error
// (the other fields are still read).
func Parse(r io.Reader) (Stats, error) {
	var out Stats
	var errs []error
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		var line *Data
		switch fields[0] {
		case "some":
			line = &out.Some
		case "full":
			line = &out.Full
		default:
			continue
		}
		for _, kv := range fields[1:] {
			if err := parseField(line, kv); err != nil {
				errs = append(errs, fmt.Errorf("%s line: %w", fields[0], err))
			}
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

func parseField(line *Data, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("invalid field %q", kv)
	}
	if k == "total" {
		t, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("invalid total %q", v)
		}
		line.Total = t
		return nil
	}
	var dst *float64
	switch k {
	case "avg10":
		dst = &line.Avg10
	case "avg60":
		dst = &line.Avg60
	case "avg300":
		dst = &line.Avg300
	default:
		return nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return fmt.Errorf("invalid %s %q", k, v)
	}
	*dst = f
	return nil
}

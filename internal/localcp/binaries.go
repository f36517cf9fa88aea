package localcp

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	// BinDirEnv overrides where FindBinDir looks for kube-apiserver.
	BinDirEnv = "NODEKIT_BIN_DIR"
	// ModulePath is the module whose _output/bin FindBinDir falls back to.
	ModulePath = "github.com/nodekit/nodekit"

	apiserverBin = "kube-apiserver"
	etcdBin      = "etcd"

	installHint = "run `make tools` in the nodekit checkout (builds kube-apiserver into _output/bin and installs etcd)"
)

// Binaries are the executables a control plane runs.
type Binaries struct {
	KubeAPIServer string // absolute path of kube-apiserver
	Etcd          string // absolute path of etcd
}

// MissingBinaryError reports that an executable the control plane needs is
// not there. Test kits use it to tell "not installed" (skip) from "broken"
// (fail).
type MissingBinaryError struct {
	Name   string   // "kube-apiserver", "etcd", or "bin dir"
	Looked []string // where it was looked for
	Reason string   // what went wrong, if more than "not found"
}

func (e *MissingBinaryError) Error() string {
	msg := e.Name + " not found"
	if len(e.Looked) > 0 {
		msg += " (looked in " + strings.Join(e.Looked, ", ") + ")"
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg + "; " + installHint
}

// FindBinDir returns the directory holding kube-apiserver: $NODEKIT_BIN_DIR
// if set, else _output/bin of the nodekit checkout found by walking up from
// the working directory to the go.mod of module github.com/nodekit/nodekit.
// It does not check that the binaries are there; FindBinaries does.
func FindBinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", fmt.Errorf("$%s=%q: %w", BinDirEnv, d, err)
		}
		return abs, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find bin dir: working directory: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isModuleRoot(filepath.Join(dir, "go.mod")) {
			return filepath.Join(dir, "_output", "bin"), nil
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", &MissingBinaryError{
		Name:   "bin dir",
		Reason: fmt.Sprintf("$%s is unset and no go.mod of module %s is in %s or above", BinDirEnv, ModulePath, wd),
	}
}

// isModuleRoot reports whether goMod is the go.mod of this module.
func isModuleRoot(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == ModulePath
		}
	}
	return false
}

// FindBinaries resolves the executables: kube-apiserver in binDir ("" means
// FindBinDir()), etcd in binDir or else on $PATH. A missing one is reported
// as a *MissingBinaryError naming every binary that is missing.
func FindBinaries(binDir string) (Binaries, error) {
	if binDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return Binaries{}, err
		}
		binDir = d
	}
	var (
		bins Binaries
		errs []error
	)
	apiserver := filepath.Join(binDir, apiserverBin)
	if err := isExecutable(apiserver); err != nil {
		e := &MissingBinaryError{Name: apiserverBin, Looked: []string{binDir}}
		if !errors.Is(err, fs.ErrNotExist) {
			e.Reason = err.Error()
		}
		errs = append(errs, e)
	} else {
		bins.KubeAPIServer = apiserver
	}
	if p := filepath.Join(binDir, etcdBin); isExecutable(p) == nil {
		bins.Etcd = p
	} else if p, err := exec.LookPath(etcdBin); err == nil {
		abs, err := filepath.Abs(p)
		if err != nil {
			return Binaries{}, fmt.Errorf("etcd at %s: %w", p, err)
		}
		bins.Etcd = abs
	} else {
		errs = append(errs, &MissingBinaryError{Name: etcdBin, Looked: []string{binDir, "$PATH"}})
	}
	return bins, errors.Join(errs...)
}

func isExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

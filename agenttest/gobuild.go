package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildCommand builds the Go command pkg (an import path in this module)
// into dir/name with the go command on $PATH, static (CGO_ENABLED=0), and
// returns the binary's path; the error carries the build's output. The
// test kit's driver and plugin processes (csitest, dratest, credprovtest)
// are built with it.
func BuildCommand(dir, pkg, name string) (string, error) {
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

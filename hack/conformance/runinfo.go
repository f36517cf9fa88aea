package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// runInfo is run.json beside a run's specs.txt: what ran, on which commit,
// and when, so that a table made from the report names its source.
type runInfo struct {
	Agent string `json:"agent"`
	// Containerd is the version asked for (1.6 or 2), RuntimeVersion what
	// the runtime reported over CRI.
	Containerd     string `json:"containerd"`
	RuntimeVersion string `json:"runtimeVersion,omitempty"`
	Set            string `json:"set"` // options.specSet's name; "" is the non-gated set
	Focus          string `json:"focus,omitempty"`
	Procs          int    `json:"procs"`
	// Commit is the checkout's HEAD; Dirty says its tree had changes to
	// tracked files, so the run was not of Commit alone.
	Commit   string    `json:"commit"`
	Dirty    bool      `json:"dirty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Passed   int       `json:"passed"`
	Failed   int       `json:"failed"`
	Skipped  int       `json:"skipped"`
}

const runInfoFile = "run.json"

// checkout reads the commit and whether tracked files differ from it.
func checkout() (commit string, dirty bool, err error) {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false, fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	commit = strings.TrimSpace(string(out))
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return "", false, fmt.Errorf("git status: %w", err)
	}
	return commit, len(strings.TrimSpace(string(st))) > 0, nil
}

func writeRunInfo(dir string, ri runInfo) error {
	b, err := json.MarshalIndent(ri, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, runInfoFile), append(b, '\n'), 0o644)
}

func readRunInfo(dir string) (runInfo, error) {
	var ri runInfo
	b, err := os.ReadFile(filepath.Join(dir, runInfoFile))
	if err != nil {
		return ri, err
	}
	if err := json.Unmarshal(b, &ri); err != nil {
		return ri, fmt.Errorf("%s: %w", filepath.Join(dir, runInfoFile), err)
	}
	return ri, nil
}

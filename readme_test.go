package nodekit_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/itest"
)

// readmeSnippetHeading marks the README section whose first ```go block
// must compile.
const readmeSnippetHeading = "## Build your own agent"

// readmeSnippet returns the first ```go block under the heading, and the
// README line it starts on.
func readmeSnippet(t *testing.T, readme string) (string, int) {
	t.Helper()
	var b strings.Builder
	inSection, inBlock, start := false, false, 0
	sc := bufio.NewScanner(strings.NewReader(readme))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case inBlock && strings.TrimSpace(line) == "```":
			return b.String(), start
		case inBlock:
			b.WriteString(line + "\n")
		case strings.HasPrefix(line, "## "):
			inSection = strings.TrimSpace(line) == readmeSnippetHeading
		case inSection && strings.TrimSpace(line) == "```go":
			inBlock, start = true, n+1
		}
	}
	if inBlock {
		t.Fatalf("README.md: the ```go block starting at line %d is not closed", start)
	}
	t.Fatalf("README.md has no ```go block under %q", readmeSnippetHeading)
	return "", 0
}

// TestReadmeSnippetCompiles builds the README's "build your own agent"
// snippet as its own module, with nodekit replaced by this checkout, and
// fails with the compiler's output.
func TestReadmeSnippetCompiles(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		itest.Require(t, "the go command", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippet, line := readmeSnippet(t, string(readme))

	// The snippet's module requires what nodekit requires, at the same
	// versions, so the module cache and go.sum of this checkout serve it.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var mod strings.Builder
	for l := range strings.Lines(string(gomod)) {
		if strings.HasPrefix(l, "module ") {
			l = "module example.com/readmesnippet\n"
		}
		mod.WriteString(l)
	}
	mod.WriteString("\nrequire github.com/nodekit/nodekit v0.0.0\n\nreplace github.com/nodekit/nodekit => " + root + "\n")
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"go.mod": mod.String(), "go.sum": string(gosum), "snippet.go": snippet} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.CommandContext(t.Context(), goTool, args...)
		cmd.Dir = dir
		// Never fetch: everything needed is already in the module cache.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s of the README snippet failed (snippet.go line 1 is README.md line %d): %v\n%s",
				strings.Join(args, " "), line, err, out)
		}
	}
}

package scenario_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/scenario"
)

const sample = `# a comment
add name=web restart=Always containers=(app,side) static
input line
----
old output

exit pod=web code=1
----
`

func TestParse(t *testing.T) {
	cmds, err := scenario.Parse("f.txt", sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 {
		t.Fatalf("%d commands, want 2", len(cmds))
	}
	c := cmds[0]
	if c.Pos != "f.txt:2" || c.Name != "add" || c.Input != "input line" || c.Expected != "old output" {
		t.Fatalf("first command: %+v", c)
	}
	if v, _ := c.Arg("name"); v != "web" {
		t.Fatalf("name=%q", v)
	}
	if got := strings.Join(c.Vals("containers"), "|"); got != "app|side" {
		t.Fatalf("containers=%q", got)
	}
	if !c.Has("static") || c.Has("missing") {
		t.Fatal("bare key not found, or a missing one found")
	}
	if v, _ := cmds[1].Arg("code"); v != "1" || cmds[1].Expected != "" {
		t.Fatalf("second command: %+v", cmds[1])
	}
}

func TestParseErrors(t *testing.T) {
	for _, text := range []string{
		"add name=web\n",              // no ----
		"add containers=(a,b\n----\n", // unbalanced
		"add =x\n----\n",              // no key
	} {
		if _, err := scenario.Parse("f.txt", text); err == nil {
			t.Errorf("Parse(%q) accepted it", text)
		}
	}
}

// A rewrite replaces only the outputs and keeps comments and spacing; a
// run without rewrite then passes on the rewritten file.
func TestRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.txt")
	if err := os.WriteFile(path, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	do := func(c *scenario.Command) string {
		if c.Name == "add" {
			return "added web\nwith 2 containers"
		}
		return "exited 1"
	}
	scenario.Run(t, path, true, do)
	got, _ := os.ReadFile(path)
	want := `# a comment
add name=web restart=Always containers=(app,side) static
input line
----
added web
with 2 containers

exit pod=web code=1
----
exited 1
`
	if string(got) != want {
		t.Fatalf("rewritten file:\n%s\nwant:\n%s", got, want)
	}
	scenario.Run(t, path, false, do)
}

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// A differing output fails the run, naming the command's position.
func TestRunReportsDifference(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.txt")
	if err := os.WriteFile(path, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	scenario.Run(r, path, false, func(c *scenario.Command) string {
		if c.Name == "exit" {
			return "" // as expected
		}
		return "new"
	})
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "s.txt:2: add: output differs") {
		t.Fatalf("errors %q, want one for the add command", r.errs)
	}
}

package scenario

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Arg is one argument of a command: key=value, key=(v1,v2) or a bare key
// (no values).
type Arg struct {
	Key  string
	Vals []string
}

// Command is one scripted step.
type Command struct {
	// Pos is FILE:LINE of the command line, for messages.
	Pos  string
	Name string
	Args []Arg
	// Input is the lines between the command and "----", joined by "\n".
	Input string
	// Expected is the output the file expects.
	Expected string

	// outStart and outEnd are the line indexes of the expected output.
	outStart, outEnd int
}

// Has reports whether the command has an argument with that key.
func (c *Command) Has(key string) bool {
	for _, a := range c.Args {
		if a.Key == key {
			return true
		}
	}
	return false
}

// Arg returns the first value of the argument with that key ("" when it
// has none) and whether the command has it.
func (c *Command) Arg(key string) (string, bool) {
	for _, a := range c.Args {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "", true
			}
			return a.Vals[0], true
		}
	}
	return "", false
}

// Vals returns every value of the argument with that key.
func (c *Command) Vals(key string) []string {
	for _, a := range c.Args {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

// Parse reads the commands of a scenario file's text; name is used in
// positions and errors.
func Parse(name, text string) ([]*Command, error) {
	lines := strings.Split(text, "\n")
	var out []*Command
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, err := parseLine(fmt.Sprintf("%s:%d", name, i+1), line)
		if err != nil {
			return nil, err
		}
		var input []string
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			input = append(input, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: command %q has no ---- line", cmd.Pos, cmd.Name)
		}
		var expected []string
		cmd.outStart = i + 1
		for i++; i < len(lines) && lines[i] != ""; i++ {
			expected = append(expected, lines[i])
		}
		cmd.outEnd = i
		cmd.Input, cmd.Expected = strings.Join(input, "\n"), strings.Join(expected, "\n")
		out = append(out, cmd)
	}
	return out, nil
}

// parseLine splits a command line into its name and arguments.
func parseLine(pos, line string) (*Command, error) {
	fields, err := splitFields(line)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pos, err)
	}
	cmd := &Command{Pos: pos, Name: fields[0]}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if key == "" {
			return nil, fmt.Errorf("%s: argument %q has no key", pos, f)
		}
		a := Arg{Key: key}
		switch {
		case !ok:
		case strings.HasPrefix(val, "(") && strings.HasSuffix(val, ")"):
			if inner := val[1 : len(val)-1]; inner != "" {
				a.Vals = strings.Split(inner, ",")
			}
		default:
			a.Vals = []string{val}
		}
		cmd.Args = append(cmd.Args, a)
	}
	return cmd, nil
}

// splitFields splits on spaces outside parentheses.
func splitFields(line string) ([]string, error) {
	var out []string
	depth, start := 0, -1
	for i, r := range line {
		switch r {
		case '(':
			depth++
		case ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ) in %q", line)
			}
		case ' ', '\t':
			if depth == 0 {
				if start >= 0 {
					out = append(out, line[start:i])
				}
				start = -1
				continue
			}
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", line)
	}
	if start >= 0 {
		out = append(out, line[start:])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty command line")
	}
	return out, nil
}

// Rewrite returns the file's text with each command's expected output
// replaced by the one given for it; everything else (comments, spacing)
// is kept.
func Rewrite(text string, cmds []*Command, outputs []string) string {
	lines := strings.Split(text, "\n")
	for i := len(cmds) - 1; i >= 0; i-- {
		c := cmds[i]
		var repl []string
		if outputs[i] != "" {
			repl = strings.Split(outputs[i], "\n")
		}
		tail := append(repl, lines[c.outEnd:]...)
		lines = append(lines[:c.outStart], tail...)
	}
	return strings.Join(lines, "\n")
}

// Run runs the scenario file at path: each command goes to do, in order,
// and what do returns (trailing newlines dropped) must equal the command's
// expected output. With rewrite, the file is written back with the actual
// outputs (comments and spacing kept) and nothing is compared.
func Run(t testing.TB, path string, rewrite bool, do func(c *Command) string) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := Parse(path, string(text))
	if err != nil {
		t.Fatal(err)
	}
	outputs := make([]string, len(cmds))
	for i, c := range cmds {
		got := strings.TrimRight(do(c), "\n")
		if strings.Contains(got, "\n\n") {
			t.Fatalf("%s: %s: output has a blank line, which the file format cannot hold:\n%s", c.Pos, c.Name, got)
		}
		outputs[i] = got
		if !rewrite && got != c.Expected {
			t.Errorf("%s: %s: output differs (go test -rewrite regenerates)\ngot:\n%s\nwant:\n%s", c.Pos, c.Name, got, c.Expected)
		}
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(Rewrite(string(text), cmds, outputs)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

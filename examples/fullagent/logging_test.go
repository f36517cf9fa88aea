package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/agenttest"
)

// The logging block and kubelet's logging flags reach the configuration
// setupLogging applies; --log-json is --logging-format=json; the options
// need LoggingAlphaOptions and json LoggingBetaOptions, as upstream.
func TestConfigLogging(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		args         []string
		format       string
		jsonSplit    bool
		err          []string
	}{
		{name: "default", format: "text"},
		{name: "file", config: "logging: {format: json}\n", format: "json"},
		{name: "flag", args: []string{"--logging-format=json"}, format: "json"},
		{name: "flag over file", config: "logging: {format: json}\n", args: []string{"--logging-format=text"}, format: "text"},
		{name: "--log-json", args: []string{"--log-json"}, format: "json"},
		{name: "--log-json over the file", config: "logging: {format: text}\n", args: []string{"--log-json"}, format: "json"},
		{name: "--log-json and another format", args: []string{"--log-json", "--logging-format=text"}, err: []string{"--log-json", "--logging-format=text"}},
		{name: "unknown format", args: []string{"--logging-format=xml"}, err: []string{"logging.format", "Unsupported log format"}},
		{name: "json gated off", config: "featureGates: {LoggingBetaOptions: false}\nlogging: {format: json}\n", err: []string{"logging.format", "LoggingBetaOptions"}},
		{name: "options gated off", config: "logging: {format: json, options: {json: {splitStream: true}}}\n", err: []string{"logging.options.json.splitStream", "LoggingAlphaOptions"}},
		{name: "options", config: "featureGates: {LoggingAlphaOptions: true}\nlogging: {format: json, options: {json: {splitStream: true, infoBufferSize: 64Ki}}}\n", format: "json", jsonSplit: true},
		{name: "options flag", config: "featureGates: {LoggingAlphaOptions: true}\n", args: []string{"--logging-format=json", "--log-json-split-stream"}, format: "json", jsonSplit: true},
		{name: "vmodule with json", config: "logging: {format: json, vmodule: [{filePattern: agent, verbosity: 4}]}\n", err: []string{"logging.vmodule", "Only supported for text log format"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadWith(t, configHeader+tc.config, nil, tc.args...)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("accepted: logging %+v", cfg.Logging)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Logging.Format != tc.format || cfg.Logging.Options.JSON.SplitStream != tc.jsonSplit {
				t.Errorf("format %q, json split stream %v; want %q, %v", cfg.Logging.Format, cfg.Logging.Options.JSON.SplitStream, tc.format, tc.jsonSplit)
			}
		})
	}
}

// fullagent with --logging-format=json logs as kubelet does: every line
// it writes parses as upstream's JSON (ts, caller, msg, v on info lines,
// err on errors, the key/values beside), up to pflag's deprecation notices
// of configuration flags, which kubelet too prints as plain text while
// parsing its command line, before logging starts. Lines of client-go
// (its feature gates through klog's global functions, its reflector
// through the contextual logger), of the CRI client and of Go's log
// package (net/http's TLS handshake errors) are among them: every
// library's klog output goes to the same logger. A line of Go's log
// package has no caller (logs.KlogWriter's depth), as in kubelet.
func TestLoggingJSON(t *testing.T) {
	e := startProcEnv(t, "--logging-format=json")
	e.agent.waitLog(90*time.Second, `"msg":"fullagent running"`)
	e.agent.waitLog(60*time.Second, `"caller":"cache/reflector.go:`, `"msg":"Caches populated"`)
	// A connection closed before its TLS handshake: net/http logs it
	// through Go's log package, which kubelet (and fullagent) route to klog.
	conn, err := net.Dial("tcp", net.JoinHostPort(e.nodeIP, "10250"))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	e.agent.waitLog(30*time.Second, `"msg":"http: TLS handshake error from `)

	lines := strings.Split(strings.TrimRight(e.agent.logOfRun(), "\n"), "\n")[1:] // after the test's "=== run" line
	var notices, parsed, withV, withErr int
	callers := map[string]bool{}
	for i, line := range lines {
		if strings.HasPrefix(line, "Flag --") && strings.Contains(line, "has been deprecated") {
			if parsed > 0 {
				t.Errorf("line %d: a deprecation notice after logging started: %s", i, line)
			}
			notices++
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("line %d is not JSON: %v: %s", i, err, line)
			continue
		}
		parsed++
		_, isTS := m["ts"].(float64)
		caller, _ := m["caller"].(string)
		msg, isMsg := m["msg"].(string)
		if file, _, ok := strings.Cut(caller, ".go:"); ok {
			callers[file+".go"] = true
		} else if !strings.HasPrefix(msg, "http: TLS handshake error") {
			t.Errorf("line %d has no caller (file.go:line): %s", i, line)
		}
		if !isTS || !isMsg {
			t.Errorf("line %d lacks upstream's ts (epoch ms) or msg: %s", i, line)
		}
		if v, ok := m["v"].(float64); ok {
			withV++
			if v > 2 {
				t.Errorf("line %d has v=%v, above the agent's -v=2: %s", i, v, line)
			}
		}
		if _, ok := m["err"]; ok {
			withErr++
		}
	}
	for _, want := range []string{"features/envvar.go", "cache/reflector.go", "pkg/remote_runtime.go", "fullagent/agent.go"} {
		if !callers[want] {
			t.Errorf("no line from %s; callers: %v", want, callers)
		}
	}
	if parsed < 20 || withV == 0 {
		t.Fatalf("%d JSON lines (%d with v, %d with err), %d notices: too few", parsed, withV, withErr, notices)
	}
	t.Logf("%d JSON lines, %d with v, %d with err; %d deprecation notices before them", parsed, withV, withErr, notices)
}

// logging.options split streams, as upstream (LoggingAlphaOptions): info
// lines go to stdout, errors to stderr, in json and in text. The agent
// runs standalone on a runtime endpoint nothing answers: it logs that it
// runs standalone (info), then fails (error).
func TestLoggingSplitStream(t *testing.T) {
	agenttest.SkipShort(t, "builds the fullagent binary")
	bin := buildAgent(t)
	for _, tc := range []struct {
		format string
		// info and isError tell an info line and an error line apart.
		info, isError func(line string) bool
	}{
		{"json",
			func(l string) bool { return strings.HasPrefix(l, "{") && strings.Contains(l, `"v":`) },
			func(l string) bool { return strings.HasPrefix(l, "{") && !strings.Contains(l, `"v":`) }},
		{"text",
			func(l string) bool { return strings.HasPrefix(l, "I") },
			func(l string) bool { return strings.HasPrefix(l, "E") }},
	} {
		t.Run(tc.format, func(t *testing.T) {
			config, root := standaloneConfig(t, "authentication: {webhook: {enabled: false}}\nauthorization: {mode: AlwaysAllow}\n")
			cmd := exec.CommandContext(t.Context(), bin, "--config="+config, "--root-dir="+root, "--hostname-override=n1",
				"--feature-gates=LoggingAlphaOptions=true", "--logging-format="+tc.format, "--log-"+tc.format+"-split-stream")
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			cmd.Env = agentEnv(os.Environ(), t.TempDir())
			var exit *exec.ExitError
			if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("fullagent: %v, want exit status 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			out, errs := nonEmptyLines(stdout.String()), nonEmptyLines(stderr.String())
			for _, l := range out {
				if !tc.info(l) {
					t.Errorf("stdout has a line that is not an info line: %s", l)
				}
			}
			var failed bool
			for _, l := range errs {
				if strings.HasPrefix(l, "Flag --") { // the command line's deprecation notices
					continue
				}
				if !tc.isError(l) {
					t.Errorf("stderr has a line that is not an error line: %s", l)
				}
				failed = failed || strings.Contains(l, "fullagent failed")
			}
			if !slices.ContainsFunc(out, func(l string) bool { return strings.Contains(l, "running standalone") }) || !failed {
				t.Errorf("want the standalone info line on stdout and the failure on stderr\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			}
		})
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

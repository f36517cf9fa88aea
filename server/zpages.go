package server

import (
	"fmt"
	"html"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Statusz describes the agent on /statusz (component-base's zpages,
// ComponentStatusz: beta and on by default in v1.36+).
type Statusz struct {
	// ComponentName heads the page ("kubelet").
	ComponentName string
	// StartTime is when the process started.
	StartTime time.Time
	// BinaryVersion ("1.37.2") and EmulationVersion ("1.37", may be
	// empty); GoVersion is the toolchain that built the binary.
	BinaryVersion, EmulationVersion, GoVersion string
}

// zpagesGroup is the API group of the structured /statusz and /flagz
// answers.
const zpagesGroup = "config.k8s.io"

const zpagesWarning = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.\n"

// zpagesDelimiters: the text pages separate names and values with one of
// these, chosen per request so that nobody parses them.
var zpagesDelimiters = [...]string{":", ": ", "=", " "}

// zpagesAnswer is what the Accept header asks of a zpage: "text" (no
// header, text/plain, */*), "json" (application/json with as=KIND,
// g=config.k8s.io and v=v1beta1 or v1alpha1: that version) or "" (not
// acceptable).
func zpagesAnswer(accept, kind string) (format, version string) {
	if strings.TrimSpace(accept) == "" {
		return "text", ""
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "text/plain", "text/*", "*/*":
			return "text", ""
		case "application/json":
			v := params["v"]
			if params["as"] == kind && params["g"] == zpagesGroup && (v == "v1beta1" || v == "v1alpha1") {
				return "json", v
			}
		}
	}
	return "", ""
}

func notAcceptable(w http.ResponseWriter, kind string) {
	http.Error(w, fmt.Sprintf("only text/plain and application/json;as=%s;v=v1beta1;g=%s are supported", kind, zpagesGroup), http.StatusNotAcceptable)
}

// statuszPaths are the first elements of the paths the secure port
// serves, as /statusz lists them.
func statuszPaths(s *Server) []string {
	paths := []string{"/attach", "/configz", "/containerLogs", "/debug", "/exec", "/healthz", "/logs", "/metrics",
		"/pods", "/portForward", "/runningpods", "/stats", "/statusz"}
	if s.cfg.Checkpointer != nil {
		paths = append(paths, "/checkpoint")
	}
	if s.cfg.Flagz != nil {
		paths = append(paths, "/flagz")
	}
	slices.Sort(paths)
	return paths
}

// statusz serves GET /statusz.
func (s *Server) statusz(w http.ResponseWriter, r *http.Request) {
	info := s.cfg.Statusz
	now := s.clock.Now()
	up := max(0, int64(now.Sub(info.StartTime).Seconds()))
	paths := statuszPaths(s)
	format, version := zpagesAnswer(r.Header.Get("Accept"), "Statusz")
	switch format {
	case "json":
		writeJSON(w, r, map[string]any{
			"kind": "Statusz", "apiVersion": zpagesGroup + "/" + version,
			"metadata":  map[string]any{"name": info.ComponentName},
			"startTime": metav1.NewTime(info.StartTime), "uptimeSeconds": up,
			"goVersion": info.GoVersion, "binaryVersion": info.BinaryVersion,
			"emulationVersion": info.EmulationVersion, "paths": paths,
		})
	case "text":
		d := html.EscapeString(zpagesDelimiters[now.Nanosecond()%len(zpagesDelimiters)])
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s statusz\n%s\n", info.ComponentName, zpagesWarning)
		fmt.Fprintf(&b, "Started%s %s\n", d, html.EscapeString(info.StartTime.Format(time.UnixDate)))
		fmt.Fprintf(&b, "Up%s %d hr %02d min %02d sec\n", d, up/3600, (up/60)%60, up%60)
		fmt.Fprintf(&b, "Go version%s %s\n", d, html.EscapeString(info.GoVersion))
		fmt.Fprintf(&b, "Binary version%s %s\n", d, html.EscapeString(info.BinaryVersion))
		if info.EmulationVersion != "" {
			fmt.Fprintf(&b, "Emulation version%s %s\n", d, html.EscapeString(info.EmulationVersion))
		} else {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "Paths%s %s\n", d, html.EscapeString(strings.Join(paths, " ")))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, b.String())
	default:
		notAcceptable(w, "Statusz")
	}
}

// flagz serves GET /flagz: the agent's flags and their values, sorted by
// name (secrets are the Flagz function's to redact).
func (s *Server) flagz(w http.ResponseWriter, r *http.Request) {
	flags := s.cfg.Flagz()
	name := "kubelet"
	if s.cfg.Statusz != nil && s.cfg.Statusz.ComponentName != "" {
		name = s.cfg.Statusz.ComponentName
	}
	format, version := zpagesAnswer(r.Header.Get("Accept"), "Flagz")
	switch format {
	case "json":
		writeJSON(w, r, map[string]any{"kind": "Flagz", "apiVersion": zpagesGroup + "/" + version,
			"metadata": map[string]any{"name": name}, "flags": flags})
	case "text":
		d := zpagesDelimiters[s.clock.Now().Nanosecond()%len(zpagesDelimiters)]
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s flagz\n%s\n", name, zpagesWarning)
		keys := make([]string, 0, len(flags))
		for k := range flags {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s%s%s\n", k, d, flags[k])
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, b.String())
	default:
		notAcceptable(w, "Flagz")
	}
}

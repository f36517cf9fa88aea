package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodesGroup is the group of every node identity (system:node:NAME).
const nodesGroup = "system:nodes"

// writeAuditPolicy writes an audit policy that logs one event per request
// of group system:nodes (stage RequestReceived, level Metadata) and nothing
// else, and returns the kube-apiserver flags that enable it with a JSON log
// at logPath, as hack/bench does for one node.
func writeAuditPolicy(dir, logPath string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	data := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted, ResponseComplete, Panic]
rules:
- level: Metadata
  userGroups: [%q]
- level: None
`, nodesGroup)
	if err := os.WriteFile(policy, []byte(data), 0o644); err != nil {
		return nil, err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + logPath,
		"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0"}, nil
}

// window is a time interval [from, to).
type window struct{ from, to time.Time }

func (w window) minutes() float64 { return w.to.Sub(w.from).Minutes() }

// userRequests is the requests one user made in the window.
type userRequests struct {
	total  int
	byKind map[string]int // "verb resource[/subresource]" or "verb /path"
}

// auditEvent is the part of an audit.k8s.io/v1 Event read here.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// countRequests counts the requests of each node identity received in w,
// by user name (system:node:NAME).
func countRequests(logPath string, w window) (map[string]*userRequests, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	out := map[string]*userRequests{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", logPath, err)
		}
		if ev.Stage != "RequestReceived" || !strings.HasPrefix(ev.User.Username, "system:node:") {
			continue
		}
		if t := ev.RequestReceivedTimestamp.Time; t.Before(w.from) || !t.Before(w.to) {
			continue
		}
		u := out[ev.User.Username]
		if u == nil {
			u = &userRequests{byKind: map[string]int{}}
			out[ev.User.Username] = u
		}
		u.total++
		u.byKind[kind(&ev)]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", logPath, err)
	}
	return out, nil
}

// kind names a request by verb and resource, e.g. "update leases" or
// "patch pods/status".
func kind(ev *auditEvent) string {
	if ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
		path, _, _ := strings.Cut(ev.RequestURI, "?")
		return ev.Verb + " " + path
	}
	r := ev.ObjectRef.Resource
	if ev.ObjectRef.Subresource != "" {
		r += "/" + ev.ObjectRef.Subresource
	}
	return ev.Verb + " " + r
}

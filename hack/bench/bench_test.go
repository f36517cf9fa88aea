package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestStartStages(t *testing.T) {
	times := map[string]*podTimes{
		// created, first request, Running write, Running seen (ms)
		"a": {created: at(0), firstRequest: at(100), runningPatch: at(1100), runningSeen: at(1110), firstKind: "patch pods/status"},
		"b": {created: at(10), firstRequest: at(510), runningPatch: at(2510), runningSeen: at(2530), firstKind: "patch pods/status"},
		"c": {created: at(20), firstRequest: at(220), runningPatch: at(3220), runningSeen: at(3250), firstKind: "get pods"},
		// never seen by a request: left out of every stage
		"d": {created: at(30), runningPatch: at(9000), runningSeen: at(9100)},
	}
	b := startStages(times)
	if b.timed != 3 {
		t.Errorf("timed = %d, want 3 (d has no first request)", b.timed)
	}
	want := stages{toFirstRequest: 200 * time.Millisecond, toRunningPatch: 2 * time.Second, toSeen: 20 * time.Millisecond, total: 2520 * time.Millisecond}
	if b.median != want {
		t.Errorf("medians = %+v, want %+v", b.median, want)
	}
	if b.medianPod != "b" || b.medianPodStages != (stages{500 * time.Millisecond, 2 * time.Second, 20 * time.Millisecond, 2520 * time.Millisecond}) {
		t.Errorf("median pod %s %+v, want b with its own stages", b.medianPod, b.medianPodStages)
	}
	if b.firstKinds["patch pods/status"] != 2 || b.firstKinds["get pods"] != 1 {
		t.Errorf("first kinds = %v", b.firstKinds)
	}
	if got := latencies(times); len(got) != 4 || got[0] != 1110*time.Millisecond || got[3] != 9070*time.Millisecond {
		t.Errorf("latencies = %v, want the 4 pods' creation → seen, sorted", got)
	}
	if b := startStages(map[string]*podTimes{"x": {created: at(0)}}); b.timed != 0 || b.medianPod != "" {
		t.Errorf("no timed pod: %+v", b)
	}
}

// auditLine is one audit event about a pod as the API server writes it.
func auditLine(stage, user, verb, sub, name string, ms, code int, body string) string {
	return auditRef(stage, user, verb, "pods", sub, name, ms, code, body)
}

// auditRef is one audit event as the API server writes it.
func auditRef(stage, user, verb, resource, sub, name string, ms, code int, body string) string {
	obj := `,"requestObject":` + body
	if body == "" {
		obj = ""
	}
	status := ""
	if code != 0 {
		status = fmt.Sprintf(`,"responseStatus":{"code":%d}`, code)
	}
	return fmt.Sprintf(`{"kind":"Event","stage":%q,"verb":%q,"user":{"username":%q},"objectRef":{"resource":%q,"subresource":%q,"namespace":"default","name":%q}%s%s,"requestReceivedTimestamp":%q}`,
		stage, verb, user, resource, sub, name, status, obj, at(ms).Format(metav1.RFC3339Micro))
}

func TestPodRequests(t *testing.T) {
	const node = "system:node:bench-node"
	lines := []string{
		auditLine("RequestReceived", "admin", "get", "", "bench-0", 5, 0, ""), // not the agent
		auditLine("RequestReceived", node, "patch", "status", "bench-0", 100, 0, ""),
		auditLine("ResponseComplete", node, "patch", "status", "bench-0", 100, 200, `{"status":{"phase":"Pending"}}`),
		auditLine("RequestReceived", node, "patch", "status", "bench-0", 900, 0, ""),
		auditLine("ResponseComplete", node, "patch", "status", "bench-0", 900, 409, `{"status":{"phase":"Running"}}`), // refused
		auditLine("RequestReceived", node, "patch", "status", "bench-0", 1000, 0, ""),
		auditLine("ResponseComplete", node, "patch", "status", "bench-0", 1000, 200, `{"status": { "phase": "Running"}}`),
		auditLine("RequestReceived", node, "patch", "status", "bench-0", 1500, 0, ""),
		auditLine("ResponseComplete", node, "patch", "status", "bench-0", 1500, 200, `{"status":{"phase":"Running"}}`), // not the first
		auditLine("RequestReceived", node, "get", "", "other", 50, 0, ""),                                              // not a burst pod
		// A token request bound to bench-1 and an event about it come
		// before anything naming it; the objectRef names the service
		// account, or nothing.
		auditRef("ResponseComplete", node, "create", "serviceaccounts", "token", "default", 60, 201, `{"spec":{"boundObjectRef":{"kind":"Pod","name":"bench-1"}}}`),
		auditRef("ResponseComplete", node, "create", "events", "", "", 70, 201, `{"involvedObject":{"kind":"Pod","name":"bench-1"}}`),
		auditRef("ResponseComplete", node, "create", "events", "", "", 10, 201, `{"involvedObject":{"kind":"Node","name":"bench-1"}}`), // not a pod
	}
	log := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	times := map[string]*podTimes{"bench-0": {created: at(0)}, "bench-1": {created: at(1)}}
	if err := podRequests(log, node, times); err != nil {
		t.Fatal(err)
	}
	p := times["bench-0"]
	if !p.firstRequest.Equal(at(100)) || p.firstKind != "patch pods/status" {
		t.Errorf("first request %v %q, want the agent's at 100 ms, patch pods/status", p.firstRequest.Sub(t0), p.firstKind)
	}
	if !p.runningPatch.Equal(at(1000)) {
		t.Errorf("Running write at %v, want the first accepted one, 1s", p.runningPatch.Sub(t0))
	}
	if q := times["bench-1"]; !q.firstRequest.Equal(at(60)) || q.firstKind != "create serviceaccounts/token" || !q.runningPatch.IsZero() {
		t.Errorf("bench-1: first request at %v (%q), Running write %v; want its token request at 60ms, no Running write", q.firstRequest.Sub(t0), q.firstKind, q.runningPatch)
	}
	counts, err := countRequests(log, node, []window{{at(0), at(950)}})
	if err != nil {
		t.Fatal(err)
	}
	if counts[0].total != 3 || counts[0].byKind["patch pods/status"] != 2 {
		t.Errorf("requests received before 950 ms: %+v, want 3 (2 status patches, a get), ResponseComplete events not counted", counts[0])
	}
}

func TestReportAllAgents(t *testing.T) {
	res := func(agent string, all time.Duration, cpu float64) *result {
		return &result{agent: agent, allRunning: all, cpuSeconds: cpu, steadyWindow: time.Minute, steadyRequests: 6,
			steadyByKind: map[string]int{"update leases": 6},
			start: startBreakdown{timed: 100, medianPod: "bench-50", median: stages{total: all / 2}, medianPodStages: stages{total: all / 2},
				firstKinds: map[string]int{"patch pods/status": 100}}}
	}
	results := []*result{res(agentFull, 6*time.Second, 3), res(agentKubelet, 4*time.Second, 2), res(agentIdeal, 500*time.Millisecond, 0.5)}
	results[0].runtime = "fake CRI"
	results[0].steadyCPU, results[1].steadyCPU, results[2].steadyCPU = 1.5, 3, 0.1
	results[0].goroutines0, results[0].goroutinesN = 200, 500
	results[1].goroutines0, results[1].goroutinesN = 300, 700
	results[2].goroutines0, results[2].goroutinesN = -1, -1
	results[0].anonNKB, results[1].anonNKB, results[2].anonNKB = 20*1024, 40*1024, 10*1024
	var b bytes.Buffer
	printReport(&b, machine{runtime: "fake CRI", cpus: 2}, options{pods: 100, runtime: runtimeFake, steady: time.Minute}, "v1.37.2", results)
	out := b.String()
	for _, want := range []string{
		"| figure | fullagent | kubelet v1.37.2 | ideal | fullagent/kubelet | ideal/kubelet |",
		"| all 100 pods Running | 6.00 s | 4.00 s | 0.50 s | 1.50 | 0.12 |",
		"| agent CPU during the burst | 3.00 s | 2.00 s | 0.50 s | 1.50 | 0.25 |",
		"| stage | fullagent | kubelet v1.37.2 | ideal |",
		"| creation → Running seen | 3.000 s | 2.000 s | 0.250 s |",
		"- ideal: median pod bench-50: 0.000 s + 0.000 s + 0.000 s = 0.250 s",
		"on a fake CRI",
		"- kubelet: 6 update leases",
		"| agent CPU per minute, steady, 100 pods | 1.50 s | 3.00 s | 0.10 s | 0.50 | 0.03 |",
		"| agent goroutines, 100 pods | 500 | 700 | – | 0.71 | – |",
		"| agent goroutines per pod | 3.00 | 4.00 | – | 0.75 | – |",
		"| agent anonymous RSS, 100 pods | 20 MiB | 40 MiB | 10 MiB | 0.50 | 0.25 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// Without kubelet there is nothing to divide by: no ratio columns.
	b.Reset()
	printReport(&b, machine{}, options{pods: 100, steady: time.Minute}, "", []*result{results[0], results[2]})
	if out := b.String(); strings.Contains(out, "/kubelet") || !strings.Contains(out, "| figure | fullagent | ideal |") {
		t.Errorf("report without kubelet:\n%s", out)
	}
}

// The anonymous RSS read from /proc is this process's own: above zero and
// below its whole RSS.
func TestAnonRSS(t *testing.T) {
	anon, all := anonRSSKB(os.Getpid()), rssKB(os.Getpid())
	if anon <= 0 || anon > all {
		t.Fatalf("RssAnon %d KiB, VmRSS %d KiB", anon, all)
	}
}

func TestParseGoroutineTotal(t *testing.T) {
	n, err := parseGoroutineTotal(bufio.NewReader(strings.NewReader("goroutine profile: total 412\n3 @ 0x1 0x2\n")))
	if err != nil || n != 412 {
		t.Errorf("parseGoroutineTotal = %d, %v, want 412", n, err)
	}
	if _, err := parseGoroutineTotal(bufio.NewReader(strings.NewReader("<html>forbidden</html>"))); err == nil {
		t.Errorf("parseGoroutineTotal of something else: no error")
	}
}

func TestRunningStatus(t *testing.T) {
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Image: "img-a"}, {Name: "b", Image: "img-b"}}}}
	now := metav1.NewTime(t0)
	st := runningStatus(p, "192.0.2.2", "10.244.0.7", now)
	if st.Phase != v1.PodRunning || st.PodIP != "10.244.0.7" || st.HostIP != "192.0.2.2" || st.StartTime == nil {
		t.Errorf("status %+v, want Running with the IPs and a start time", st)
	}
	ready := map[v1.PodConditionType]bool{}
	for _, c := range st.Conditions {
		ready[c.Type] = c.Status == v1.ConditionTrue
	}
	if !ready[v1.PodReady] || !ready[v1.ContainersReady] || !ready[v1.PodInitialized] || !ready[v1.PodScheduled] {
		t.Errorf("conditions %v, want Ready, ContainersReady, Initialized and PodScheduled true", st.Conditions)
	}
	if len(st.ContainerStatuses) != 2 || st.ContainerStatuses[1].Name != "b" || st.ContainerStatuses[1].State.Running == nil || !st.ContainerStatuses[1].Ready {
		t.Errorf("container statuses %+v, want both running and ready", st.ContainerStatuses)
	}
}

func TestValidate(t *testing.T) {
	ok := options{pods: 1, steady: time.Second, runtime: runtimeFake, agents: []string{agentFull, agentKubelet, agentIdeal, agentIdealRequests, agentIdealLimited}}
	if err := ok.validate(); err != nil {
		t.Errorf("fake runtime, all five agents: %v", err)
	}
	if ok.repeat != 1 {
		t.Errorf("--repeat left out: %d rounds, want 1", ok.repeat)
	}
	for _, o := range []options{
		{pods: 1, steady: time.Second, runtime: "docker", agents: []string{agentFull}},
		{pods: 1, steady: time.Second, runtime: runtimeFake, agents: []string{"perfect"}},
		{pods: 1, steady: time.Second, runtime: runtimeFake, agents: []string{agentIdeal, agentIdeal}},
		{pods: 1, steady: time.Second, runtime: runtimeFake, agents: []string{"ideal-request"}},
		{pods: 1, steady: time.Second, runtime: runtimeFake, agents: []string{agentFull}, repeat: -1},
	} {
		if err := o.validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestValidatePull(t *testing.T) {
	base := func(runtime string, pull bool, images int) options {
		return options{pods: 10, steady: time.Second, runtime: runtime, agents: []string{agentFull}, pull: pull, pullImages: images}
	}
	for _, tc := range []struct {
		o    options
		want string // "" for valid
	}{
		{o: base(runtimeContainerd, true, 1)},
		{o: base(runtimeContainerd, true, 10)},
		{o: base(runtimeFake, false, 1)},
		{o: base(runtimeFake, true, 1), want: "--pull needs --runtime=containerd"},
		{o: base(runtimeContainerd, true, 11), want: "--pull-images=11"},
		{o: base(runtimeContainerd, true, 0), want: "--pull-images=0"},
		{o: base(runtimeContainerd, false, 2), want: "needs --pull"},
	} {
		err := tc.o.validate()
		if tc.want == "" && err != nil {
			t.Errorf("%+v: %v", tc.o, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want an error with %q", tc.o, err, tc.want)
		}
	}
}

func TestValidateAPILimits(t *testing.T) {
	for _, tc := range []struct {
		qps, burst int
		want       string // "" for valid
		lines      string // the config lines of a valid pair
	}{
		{},
		{qps: 500, lines: "kubeAPIQPS: 500\nkubeAPIBurst: 1000\n"},
		{qps: 500, burst: 700, lines: "kubeAPIQPS: 500\nkubeAPIBurst: 700\n"},
		{qps: -1, want: "--kube-api-qps=-1"},
		{burst: 10, want: "needs --kube-api-qps"},
		{qps: 5, burst: -2, want: "--kube-api-burst=-2"},
	} {
		o := options{pods: 1, steady: time.Second, runtime: runtimeFake, agents: []string{agentFull}, apiQPS: tc.qps, apiBurst: tc.burst}
		err := o.validate()
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("qps %d burst %d: %v, want an error with %q", tc.qps, tc.burst, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("qps %d burst %d: %v", tc.qps, tc.burst, err)
		}
		if got := o.apiLimits(); got != tc.lines {
			t.Errorf("qps %d burst %d: config lines %q, want %q", tc.qps, tc.burst, got, tc.lines)
		}
	}
}

func TestBurstImages(t *testing.T) {
	if got := burstImages(options{pullImages: 3}); len(got) != 1 || got[0] == "" || strings.HasPrefix(got[0], pullRegistry) {
		t.Errorf("without --pull: %v, want the preloaded busybox only", got)
	}
	if got := burstImages(options{pull: true, pullImages: 1}); len(got) != 1 || !strings.HasPrefix(got[0], pullRegistry+"/") {
		t.Errorf("--pull: %v, want one image of %s", got, pullRegistry)
	}
	got := burstImages(options{pull: true, pullImages: 3})
	seen := map[string]bool{}
	for _, ref := range got {
		seen[ref] = strings.HasPrefix(ref, pullRegistry+"/")
	}
	if len(got) != 3 || len(seen) != 3 || !seen[got[0]] || !seen[got[2]] {
		t.Errorf("--pull-images 3: %v, want 3 distinct images of %s", got, pullRegistry)
	}
}

// TestPullFigures reads a registry access log and the events of an audit
// log as a cold-cache burst leaves them.
func TestPullFigures(t *testing.T) {
	const node = "system:node:bench-node"
	dir := t.TempDir()
	access := func(method, path string, code int) string {
		return fmt.Sprintf(`127.0.0.1 - - [03/Dec/2026:13:00:00 +0000] "%s %s HTTP/1.1" %d 527 "" "containerd/1.6.20"`, method, path, code)
	}
	reg := []string{
		`time="2026-12-03T13:00:00Z" level=info msg="listening on 127.0.0.1:5000, tls"`,
		access("HEAD", "/v2/bench/busybox/blobs/sha256:aa", 404), // Push
		access("HEAD", "/v2/bench/busybox/manifests/1.0?ns=bench.nodekit.test", 200),
		access("HEAD", "/v2/bench/busybox/manifests/1.0?ns=bench.nodekit.test", 200),
		access("GET", "/v2/bench/busybox/manifests/sha256:bb?ns=bench.nodekit.test", 200),
		access("GET", "/v2/bench/busybox/blobs/sha256:cc?ns=bench.nodekit.test", 200),
		access("GET", "/v2/bench/busybox/blobs/sha256:dd?ns=bench.nodekit.test", 200),
		access("GET", "/v2/bench/busybox/manifests/2.0?ns=bench.nodekit.test", 404), // not served
	}
	event := func(ms int, pod, reason, msg string) string {
		return auditRef("ResponseComplete", node, "create", "events", "", "", ms, 201,
			fmt.Sprintf(`{"involvedObject":{"kind":"Pod","name":%q},"reason":%q,"message":%q}`, pod, reason, msg))
	}
	audit := []string{
		event(100, "bench-0", "Pulling", `Pulling image "bench.nodekit.test/bench/busybox:1.0"`),
		event(150, "bench-1", "Pulling", `Pulling image "bench.nodekit.test/bench/busybox:1.0"`),
		event(900, "bench-0", "Pulled", `Successfully pulled image "x" in 700ms (800ms including waiting). Image size: 1 bytes.`),
		event(1100, "bench-1", "Pulled", `Successfully pulled image "x" in 1.2s (1.3s including waiting). Image size: 1 bytes.`),
		event(1600, "bench-2", "Pulled", `Container image "x" already present on machine`),
		event(1700, "bench-2", "Started", `Started container app`),
		auditRef("ResponseComplete", "admin", "create", "events", "", "", 5000, 201, `{"involvedObject":{"kind":"Pod","name":"bench-3"},"reason":"Pulled","message":"not the agent"}`),
	}
	regLog, auditLog := filepath.Join(dir, "registry.log"), filepath.Join(dir, "audit.log")
	for path, lines := range map[string][]string{regLog: reg, auditLog: audit} {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := readPullFigures(auditLog, regLog, node)
	if err != nil {
		t.Fatal(err)
	}
	if f.tagResolves != 2 || f.manifestGets != 1 || f.blobGets != 2 {
		t.Errorf("registry: %d tag resolves, %d manifest GETs, %d blob GETs; want 2, 1, 2", f.tagResolves, f.manifestGets, f.blobGets)
	}
	if f.pulling != 2 || f.pulled != 2 || f.present != 1 {
		t.Errorf("events: %d Pulling, %d pulled, %d present; want 2, 2, 1", f.pulling, f.pulled, f.present)
	}
	if f.span != 1500*time.Millisecond {
		t.Errorf("first Pulling → last Pulled = %v, want 1.5s", f.span)
	}
	if !slices.Equal(f.took, []time.Duration{700 * time.Millisecond, 1200 * time.Millisecond}) || !slices.Equal(f.waited, []time.Duration{800 * time.Millisecond, 1300 * time.Millisecond}) {
		t.Errorf("Pulled durations %v, including waiting %v", f.took, f.waited)
	}
	if _, err := readPullFigures(auditLog, filepath.Join(dir, "missing.log"), node); err == nil {
		t.Error("no registry log: no error")
	}
}

func TestReportPull(t *testing.T) {
	res := func(agent string, f *pullFigures) *result {
		return &result{agent: agent, allRunning: time.Second, steadyWindow: time.Minute, pull: f}
	}
	full := &pullFigures{tagResolves: 10, manifestGets: 10, blobGets: 20, pulling: 10, pulled: 10, span: 2 * time.Second,
		took: []time.Duration{time.Second, 1500 * time.Millisecond, 1800 * time.Millisecond}, waited: []time.Duration{2 * time.Second}}
	kube := &pullFigures{tagResolves: 5, manifestGets: 5, blobGets: 10, pulling: 5, pulled: 5, present: 5, span: 4 * time.Second}
	results := []*result{res(agentFull, full), res(agentKubelet, kube)}
	var b bytes.Buffer
	o := options{pods: 10, runtime: runtimeContainerd, steady: time.Minute, pull: true, pullImages: 1}
	printReport(&b, machine{}, o, "v1.37.2", results)
	out := b.String()
	for _, want := range []string{
		"cold cache: pulled from a local registry",
		"| pulls started at the registry (manifest requests by tag), 1 image(s) | 10 | 5 | 2.00 |",
		"| registry blob GETs | 20 | 10 | 2.00 |",
		"| Pulled events: already present | 0 | 5 | 0.00 |",
		"| first Pulling → last Pulled event | 2.00 s | 4.00 s | 0.50 |",
		"| pull time in Pulled events, median | 1.50 s | – | – |",
		"| pull time in Pulled events, max | 1.80 s | – | – |",
		"| pull time including waiting, max | 2.00 s | – | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	o.pull = false
	printReport(&b, machine{}, o, "v1.37.2", results)
	if out := b.String(); strings.Contains(out, "Pulling") || !strings.Contains(out, "image present") {
		t.Errorf("report without --pull has pull rows or no 'image present':\n%s", out)
	}
}

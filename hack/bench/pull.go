package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/internal/localcri"
	"github.com/nodekit/nodekit/internal/localregistry"
)

// pullRegistry is the registry name the --pull images are pushed under;
// the run's containerd resolves it to the local registry only.
const pullRegistry = "bench.nodekit.test"

// burstImages are the images the burst's pods use, pod i the
// (i mod len)-th: the preloaded busybox, or with --pull the
// --pull-images repositories of the local registry (same content).
func burstImages(o options) []string {
	if !o.pull {
		return []string{localcri.BusyboxImage}
	}
	if o.pullImages <= 1 {
		return []string{pullRegistry + "/bench/busybox:1.0"}
	}
	refs := make([]string, o.pullImages)
	for i := range refs {
		refs[i] = fmt.Sprintf("%s/bench/busybox-%d:1.0", pullRegistry, i)
	}
	return refs
}

// startPullNode starts the local registry next to dir (../registry), a
// containerd in dir whose only way to pullRegistry is that registry (and which
// imports the pause image only), pushes busybox under every burst image
// and checks through the CRI that none is in containerd's store yet.
func startPullNode(ctx context.Context, o options, dir string) (*benchNode, error) {
	reg, err := localregistry.Start(ctx, localregistry.Config{Dir: filepath.Join(filepath.Dir(dir), "registry")})
	if err != nil {
		return nil, err
	}
	cleanupCtx := context.WithoutCancel(ctx)
	cri, err := localcri.Start(ctx, localcri.Config{Dir: dir, Version: o.containerd,
		Mirrors: []localcri.Mirror{{Names: []string{pullRegistry}, Host: reg.Host, CAFile: reg.CAFile}}})
	if err != nil {
		_ = reg.Stop(cleanupCtx)
		return nil, err
	}
	stop := func(ctx context.Context) error { return errors.Join(cri.Stop(ctx), reg.Stop(ctx)) }
	images := burstImages(o)
	if err := pushCold(ctx, reg, cri, images); err != nil {
		_ = stop(cleanupCtx)
		return nil, err
	}
	gw := cri.Gateway.String()
	return &benchNode{endpoint: cri.Endpoint, nodeIP: gw, address: gw, healthz: gw,
		runtime: "containerd " + cri.RuntimeVersion, registryLog: reg.LogFile, stop: stop}, nil
}

// pushCold pushes the built busybox under refs and fails unless the CRI
// says none of refs is present.
func pushCold(ctx context.Context, reg *localregistry.Registry, cri *localcri.Containerd, refs []string) error {
	var busybox string
	for _, it := range cri.Built {
		if it.Name == localcri.ImageBusybox {
			busybox = it.Path
		}
	}
	if busybox == "" {
		return errors.New("--pull: localcri built no busybox image to push")
	}
	if err := reg.Push(ctx, busybox, refs...); err != nil {
		return fmt.Errorf("--pull: %w", err)
	}
	conn, err := grpc.NewClient(cri.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	for _, ref := range refs {
		st, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			return fmt.Errorf("--pull: CRI ImageStatus %s: %w", ref, err)
		}
		if st.GetImage() != nil {
			return fmt.Errorf("--pull: %s is already in containerd's store (id %s): not a cold cache", ref, st.GetImage().GetId())
		}
	}
	logf("registry %s holds %d image name(s), none in containerd's store", reg.Host, len(refs))
	return nil
}

// pullFigures is what the registry and the agent's events say about the
// burst's pulls.
type pullFigures struct {
	// tagResolves are manifest requests by tag (HEAD or GET): one per pull
	// containerd started; manifestGets are manifest GETs (by tag or
	// digest) and blobGets blob GETs, all answered 2xx.
	tagResolves, manifestGets, blobGets int
	// pulling, pulled and present count the agent's events: reason
	// Pulling, reason Pulled for a pull, reason Pulled for an image
	// already present.
	pulling, pulled, present int
	// span is the first Pulling event to the last Pulled one (either
	// kind), as the API server received them; -1 without both.
	span time.Duration
	// took and waited are the durations the Pulled events quote ("in X
	// (Y including waiting)"), sorted.
	took, waited []time.Duration
}

// registryLine matches an access-log line's request and status.
var registryLine = regexp.MustCompile(`"(GET|HEAD) (/v2/\S+) HTTP/[0-9.]+" (\d{3})`)

// countRegistry counts the pull requests in the registry's access log
// (Push sends no GET and no manifest HEAD, so all are the pullers').
func countRegistry(logPath string, f *pullFigures) error {
	file, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("registry log: %w", err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := registryLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[3], "2") {
			continue
		}
		path, _, _ := strings.Cut(m[2], "?")
		if _, ref, ok := strings.Cut(path, "/manifests/"); ok {
			if !strings.HasPrefix(ref, "sha256:") {
				f.tagResolves++
			}
			if m[1] == "GET" {
				f.manifestGets++
			}
		} else if m[1] == "GET" && strings.Contains(path, "/blobs/") {
			f.blobGets++
		}
	}
	return sc.Err()
}

// pulledDurations matches a Pulled event's "in 1.2s (1.5s including
// waiting)".
var pulledDurations = regexp.MustCompile(`in (\S+) \((\S+) including waiting\)`)

// pullEvents reads the image events user created about pods (their
// bodies are in the audit log, see writeAuditPolicy).
func pullEvents(auditLog, user string, f *pullFigures) error {
	var first, last time.Time
	err := scanAudit(auditLog, func(ev *auditEvent) {
		if ev.Stage != "ResponseComplete" || ev.User.Username != user || ev.ObjectRef == nil || ev.ObjectRef.Resource != "events" || podNamedIn(ev.RequestObject) == "" {
			return
		}
		var b struct{ Reason, Message, Note string }
		if json.Unmarshal(ev.RequestObject, &b) != nil {
			return
		}
		at := ev.RequestReceivedTimestamp.Time
		switch b.Reason {
		case "Pulling":
			f.pulling++
			if first.IsZero() || at.Before(first) {
				first = at
			}
		case "Pulled":
			msg := b.Message + b.Note
			if m := pulledDurations.FindStringSubmatch(msg); m != nil {
				f.pulled++
				if d, err := time.ParseDuration(m[1]); err == nil {
					f.took = append(f.took, d)
				}
				if d, err := time.ParseDuration(m[2]); err == nil {
					f.waited = append(f.waited, d)
				}
			} else if strings.Contains(msg, "already present") {
				f.present++
			}
			if at.After(last) {
				last = at
			}
		}
	})
	slices.Sort(f.took)
	slices.Sort(f.waited)
	f.span = -1
	if !first.IsZero() && !last.IsZero() {
		f.span = last.Sub(first)
	}
	return err
}

// readPullFigures gathers the pull figures of one run.
func readPullFigures(auditLog, registryLog, user string) (*pullFigures, error) {
	f := &pullFigures{}
	if err := countRegistry(registryLog, f); err != nil {
		return nil, err
	}
	if err := pullEvents(auditLog, user, f); err != nil {
		return nil, err
	}
	return f, nil
}

// pullRows are the report's rows for --pull; a run without figures shows –.
func pullRows(o options) []row {
	get := func(v func(*pullFigures) float64) func(*result) float64 {
		return func(r *result) float64 {
			if r.pull == nil {
				return -1
			}
			return v(r.pull)
		}
	}
	durAt := func(ds []time.Duration, p int) float64 {
		if len(ds) == 0 {
			return -1
		}
		return pct(ds, p).Seconds()
	}
	n := strconv.Itoa(o.pullImages)
	return []row{
		{"pulls started at the registry (manifest requests by tag), " + n + " image(s)", get(func(f *pullFigures) float64 { return float64(f.tagResolves) }), "", 0},
		{"registry manifest GETs", get(func(f *pullFigures) float64 { return float64(f.manifestGets) }), "", 0},
		{"registry blob GETs", get(func(f *pullFigures) float64 { return float64(f.blobGets) }), "", 0},
		{"Pulling events", get(func(f *pullFigures) float64 { return float64(f.pulling) }), "", 0},
		{"Pulled events: pulled", get(func(f *pullFigures) float64 { return float64(f.pulled) }), "", 0},
		{"Pulled events: already present", get(func(f *pullFigures) float64 { return float64(f.present) }), "", 0},
		{"first Pulling → last Pulled event", get(func(f *pullFigures) float64 {
			if f.span < 0 {
				return -1
			}
			return f.span.Seconds()
		}), "s", 2},
		{"pull time in Pulled events, median", get(func(f *pullFigures) float64 { return durAt(f.took, 50) }), "s", 2},
		{"pull time in Pulled events, max", get(func(f *pullFigures) float64 { return durAt(f.took, 100) }), "s", 2},
		{"pull time including waiting, median", get(func(f *pullFigures) float64 { return durAt(f.waited, 50) }), "s", 2},
		{"pull time including waiting, max", get(func(f *pullFigures) float64 { return durAt(f.waited, 100) }), "s", 2},
	}
}

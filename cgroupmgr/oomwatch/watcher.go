package oomwatch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultPath is the kernel log device.
const DefaultPath = "/dev/kmsg"

// Event is one OOM kill.
type Event struct {
	// Time is when the kernel invoked the OOM killer.
	Time time.Time
	// PID and ProcessName are the killed process.
	PID         int
	ProcessName string
	// ContainerCgroup is the memory cgroup of the killed process
	// (task_memcg; "Task in X" on old kernels).
	ContainerCgroup string
	// VictimCgroup is the memory cgroup whose limit was hit (oom_memcg;
	// "limit of Y" on old kernels): "/" for a system-wide OOM. The names
	// follow cAdvisor's, which upstream kubelet reads.
	VictimCgroup string
}

// Config configures a Watcher.
type Config struct {
	// OnOOM is called, from Run's goroutine, for each OOM kill. Required.
	OnOOM func(Event)
	// Path is the kernel log; "" is /dev/kmsg.
	Path string
	// Reader, when set, is read instead of Path until EOF (tests, or a
	// recorded log): kmsg records or bare kernel messages, one a line.
	Reader io.Reader
	// FromStart reads the kernel's whole ring buffer; by default only
	// records written after Run starts are read.
	FromStart bool
	// Clock dates bare messages (no kmsg header); nil is the real clock.
	Clock clock.PassiveClock
	// BootTime is the wall time of the kmsg clock's zero; zero derives it
	// from Clock and CLOCK_MONOTONIC.
	BootTime time.Time
}

// Watcher reads the kernel log and reports OOM kills.
type Watcher struct {
	cfg Config

	mu      sync.Mutex
	pending *Event
}

// New returns a Watcher; it opens nothing until Run.
func New(cfg Config) (*Watcher, error) {
	if cfg.OnOOM == nil {
		return nil, errors.New("oomwatch: Config.OnOOM is required")
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.BootTime.IsZero() {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
			cfg.BootTime = cfg.Clock.Now().Add(-time.Duration(ts.Nano()))
		}
	}
	return &Watcher{cfg: cfg}, nil
}

// Run reads the kernel log until ctx is done (or the Reader's EOF). When
// the log cannot be opened (no /dev/kmsg, no permission) it logs that once
// and returns nil: OOM reporting is then off, nothing else is.
func (w *Watcher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if w.cfg.Reader != nil {
		s := bufio.NewScanner(w.cfg.Reader)
		s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for s.Scan() {
			if ctx.Err() != nil {
				return nil
			}
			w.Feed(s.Text())
		}
		return s.Err()
	}
	fd, err := unix.Open(w.cfg.Path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		logger.Info("OOM watcher off: cannot read the kernel log", "path", w.cfg.Path, "err", err)
		return nil
	}
	if !w.cfg.FromStart {
		if _, err := unix.Seek(fd, 0, io.SeekEnd); err != nil {
			logger.V(2).Info("Cannot skip old kernel log records", "path", w.cfg.Path, "err", err)
		}
	}
	// Non-blocking, so the runtime poller owns it and Close ends a Read.
	f := os.NewFile(uintptr(fd), w.cfg.Path)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		_ = f.Close()
	}()
	// Each read returns one record, which must fit the buffer.
	buf := make([]byte, 16*1024)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, unix.EPIPE) {
				// The ring buffer overwrote records before we read them.
				logger.V(2).Info("Kernel log records lost; continuing")
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("oomwatch: read %s: %w", w.cfg.Path, err)
		}
		for _, line := range strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n") {
			w.Feed(line)
		}
	}
}

var (
	// "<comm> invoked oom-killer: gfp_mask=..." opens a report.
	invokedRE = regexp.MustCompile(`invoked oom-killer:`)
	// cgroup v1, kernels before 4.19.
	legacyCgroupRE = regexp.MustCompile(`Task in (.*) killed as a result of limit of (.*)`)
	// Kernels 4.19 and later: one summary line.
	summaryRE = regexp.MustCompile(`oom-kill:constraint=([^,]*),.*?(?:oom_memcg=(.*?)|global_oom),task_memcg=(.*),task=(.*),pid=(\d+),uid=(\d+)`)
	// "Out of memory: Killed process ..." (system), "Memory cgroup out of
	// memory: Killed process ..." (v1 and v2 limits), or a bare "Killed
	// process ..." on old kernels: the last line of a report.
	killedRE = regexp.MustCompile(`Killed process (\d+) \((.+?)\)(?:[ ,]|$)`)
)

// Feed processes one kernel log line: a /dev/kmsg record
// ("6,1234,5000000,-;message"), a continuation line (ignored) or a bare
// message. It is Run's step; tests call it directly.
func (w *Watcher) Feed(line string) {
	if line == "" || line[0] == ' ' {
		return
	}
	msg, ts, ok := parseRecord(line)
	when := w.cfg.BootTime.Add(ts)
	if !ok {
		msg, when = line, w.cfg.Clock.Now()
	}
	var done *Event
	w.mu.Lock()
	switch {
	case invokedRE.MatchString(msg):
		if w.pending != nil && w.pending.PID != 0 {
			done = w.pending
		}
		w.pending = &Event{Time: when, ContainerCgroup: "/", VictimCgroup: "/"}
	case w.pending == nil:
	default:
		if m := summaryRE.FindStringSubmatch(msg); m != nil {
			w.pending.VictimCgroup = cleanCgroup(m[2])
			w.pending.ContainerCgroup = cleanCgroup(m[3])
			w.pending.ProcessName = m[4]
			w.pending.PID, _ = strconv.Atoi(m[5])
		} else if m := legacyCgroupRE.FindStringSubmatch(msg); m != nil {
			w.pending.ContainerCgroup = cleanCgroup(m[1])
			w.pending.VictimCgroup = cleanCgroup(m[2])
		} else if m := killedRE.FindStringSubmatch(msg); m != nil {
			w.pending.PID, _ = strconv.Atoi(m[1])
			w.pending.ProcessName = m[2]
			done, w.pending = w.pending, nil
		}
	}
	w.mu.Unlock()
	if done != nil {
		w.cfg.OnOOM(*done)
	}
}

// parseRecord splits a kmsg record into its message and timestamp (since
// boot).
func parseRecord(line string) (string, time.Duration, bool) {
	header, msg, ok := strings.Cut(line, ";")
	if !ok {
		return "", 0, false
	}
	fields := strings.Split(header, ",")
	if len(fields) < 4 {
		return "", 0, false
	}
	for _, f := range fields[:3] {
		if _, err := strconv.ParseUint(f, 10, 64); err != nil {
			return "", 0, false
		}
	}
	us, _ := strconv.ParseInt(fields[2], 10, 64)
	return msg, time.Duration(us) * time.Microsecond, true
}

func cleanCgroup(s string) string {
	if s == "" {
		return "/"
	}
	return path.Join("/", s)
}

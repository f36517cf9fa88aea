package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The CRI container log format, one record per line:
//
//	2016-10-06T00:17:09.669794202Z stdout F a whole line
//	2016-10-06T00:17:09.669794203Z stderr P the start of a long line
//
// TAG is P for a partial record (the line goes on in the next record) or F
// for the final part of a line; more tags may follow, separated by ':'.
// Files written by the Docker json-file driver ({"log":..., "stream":...,
// "time":...} per line) are read too.
const (
	streamStdout = "stdout"
	streamStderr = "stderr"
	tagPartial   = "P"

	// timestampOut is how timestamps are printed with ?timestamps=true:
	// RFC 3339 with nanoseconds, fixed width.
	timestampOut = "2006-01-02T15:04:05.000000000Z07:00"
	// followRecheck is how often a follow looks for new data without a
	// file event (and re-checks that the container still runs).
	followRecheck = time.Second
	// tailBlock is the read size when searching backwards for tail lines.
	tailBlock = 4096
)

// logRecord is one parsed record of a container log file.
type logRecord struct {
	time   time.Time
	stream string // stdout or stderr
	// content is the record's text; a final record (F) keeps the line's
	// trailing newline, a partial one (P) has none.
	content []byte
}

// parseCRILog parses one record in the CRI log format. line may end with
// the newline that separates records. content aliases line.
func parseCRILog(line []byte) (logRecord, error) {
	var rec logRecord
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return rec, errors.New("no timestamp")
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return rec, fmt.Errorf("bad timestamp %q: %w", ts, err)
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return rec, errors.New("no stream")
	}
	if s := string(stream); s != streamStdout && s != streamStderr {
		return rec, fmt.Errorf("unknown stream %q", stream)
	}
	tags, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return rec, errors.New("no tag")
	}
	first, _, _ := bytes.Cut(tags, []byte{':'})
	if string(first) == tagPartial {
		content = bytes.TrimSuffix(content, []byte{'\n'})
	}
	return logRecord{time: t, stream: string(stream), content: content}, nil
}

// parseJSONLog parses one record written by the Docker json-file driver.
func parseJSONLog(line []byte) (logRecord, error) {
	var l struct {
		Log    string    `json:"log"`
		Stream string    `json:"stream"`
		Time   time.Time `json:"time"`
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return logRecord{}, fmt.Errorf("not a JSON log record: %w", err)
	}
	if l.Stream != streamStdout && l.Stream != streamStderr {
		return logRecord{}, fmt.Errorf("unknown stream %q", l.Stream)
	}
	return logRecord{time: l.Time, stream: l.Stream, content: []byte(l.Log)}, nil
}

// logParser picks the format of a file from its first record.
func logParser(first []byte) (func([]byte) (logRecord, error), error) {
	if _, err := parseCRILog(first); err == nil {
		return parseCRILog, nil
	}
	if _, err := parseJSONLog(first); err == nil {
		return parseJSONLog, nil
	}
	return nil, fmt.Errorf("unsupported log format: %q", first)
}

// logReadOptions are the PodLogOptions a log read honours.
type logReadOptions struct {
	tailLines  *int64 // nil: all; 0: none
	limitBytes *int64 // nil: no limit
	since      time.Time
	follow     bool
	timestamps bool
}

// errLimitReached stops a read once limitBytes were written.
var errLimitReached = errors.New("log byte limit reached")

// logWriter sends records to the requested streams, honouring since,
// timestamps and the byte limit. A nil stream is not wanted: its records
// are skipped and not counted.
type logWriter struct {
	stdout, stderr io.Writer
	opts           *logReadOptions
	remain         int64
	lineStart      bool // the next record begins a new line
}

func (w *logWriter) write(rec logRecord) error {
	newLine := w.lineStart
	w.lineStart = len(rec.content) == 0 || rec.content[len(rec.content)-1] == '\n'
	if rec.time.Before(w.opts.since) {
		return nil
	}
	out := w.stdout
	if rec.stream == streamStderr {
		out = w.stderr
	}
	if out == nil {
		return nil
	}
	line := rec.content
	if w.opts.timestamps && newLine {
		line = append([]byte(rec.time.Format(timestampOut)+" "), line...)
	}
	if int64(len(line)) > w.remain {
		line = line[:w.remain]
	}
	n, err := out.Write(line)
	w.remain -= int64(n)
	if err != nil {
		return err
	}
	if n < len(line) {
		return io.ErrShortWrite
	}
	if w.remain <= 0 {
		return errLimitReached
	}
	return nil
}

// tailStart returns the offset of the first of the last n lines of f (a
// final line without a newline does not count). n < 0 means the start.
func tailStart(f io.ReadSeeker, n int64) (int64, error) {
	if n < 0 {
		return 0, nil
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	// Walk back from the end counting newlines; the n+1-th newline from
	// the end (ignoring the very last byte's) ends the line before the
	// wanted ones.
	buf := make([]byte, tailBlock)
	var seen int64
	end := size
	for end > 0 {
		start := max(end-tailBlock, 0)
		chunk := buf[:end-start]
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(f, chunk); err != nil {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			seen++
			if seen > n {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// readLog copies the container log at path to stdout and stderr (either
// may be nil) as opts say. With follow it keeps reading until running
// reports false (checked when it reaches the end of the file) or ctx ends;
// running may be nil (not running).
func readLog(ctx context.Context, clk clock.Clock, path string, opts logReadOptions, running func(context.Context) (bool, error), stdout, stderr io.Writer) error {
	logger := klog.FromContext(ctx)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open log file: %w", err)
	}
	return followLog(ctx, clk, f, path, opts, running, stdout, stderr, logger)
}

// followLog is readLog on an open file, which it closes.
func followLog(ctx context.Context, clk clock.Clock, f *os.File, path string, opts logReadOptions, running func(context.Context) (bool, error), stdout, stderr io.Writer, logger klog.Logger) error {
	lf := &logFollower{clk: clk, path: path, f: f, running: running}
	defer lf.close()
	tail := int64(-1)
	if opts.tailLines != nil {
		tail = *opts.tailLines
	}
	if err := lf.seekTail(tail); err != nil {
		return err
	}
	limited := opts.tailLines != nil && !opts.follow
	left := tail
	w := &logWriter{stdout: stdout, stderr: stderr, opts: &opts, remain: 1<<63 - 1, lineStart: true}
	if opts.limitBytes != nil {
		w.remain = *opts.limitBytes
	}
	var parse func([]byte) (logRecord, error)
	stop := false
	for {
		if stop || (limited && left <= 0) {
			return nil
		}
		line, err := lf.r.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if errors.Is(err, io.EOF) {
			if opts.follow {
				if done, err := lf.awaitMore(ctx, line); done || err != nil {
					return err
				}
				continue
			}
			stop = true
			if len(line) == 0 {
				continue
			}
		}
		if parse == nil {
			if parse, err = logParser(line); err != nil {
				return err
			}
		}
		rec, err := parse(line)
		if err != nil {
			logger.V(2).Info("Skipping an unparsable log record", "path", path, "err", err)
			continue
		}
		if err := w.write(rec); err != nil {
			if errors.Is(err, errLimitReached) {
				return nil
			}
			return err
		}
		left--
	}
}

// logFollower is the file side of followLog: the open log file (replaced
// when the runtime recreates it), its reader, and the directory watch that
// wakes it when the file grows.
type logFollower struct {
	clk     clock.Clock
	path    string
	f       *os.File
	r       *bufio.Reader
	running func(context.Context) (bool, error)
	watcher *fsnotify.Watcher
	// finishing is set once the container has stopped: what is left in
	// the file is read, and the next end of file ends the follow.
	finishing bool
}

// close stops the watch, if one was started, then closes the current file.
func (lf *logFollower) close() {
	if lf.watcher != nil {
		lf.watcher.Close()
	}
	lf.f.Close()
}

// seekTail positions the file at the first of its last tail lines (the
// start for tail < 0) and sets up the reader there.
func (lf *logFollower) seekTail(tail int64) error {
	start, err := tailStart(lf.f, tail)
	if err != nil {
		return fmt.Errorf("find the last %d lines of %s: %w", tail, lf.path, err)
	}
	if _, err := lf.f.Seek(start, io.SeekStart); err != nil {
		return fmt.Errorf("seek in %s: %w", lf.path, err)
	}
	lf.r = bufio.NewReader(lf.f)
	return nil
}

// awaitMore is called at the end of the file while following, with the
// incomplete record read so far. It steps back over that record and waits
// until there may be more to read: the first time it only starts the
// watch; later it checks whether the container still runs and, if so,
// waits for the file to change, reopening it when it was recreated. done
// reports that the follow is over (the container had stopped and the
// rest of the file has been read).
func (lf *logFollower) awaitMore(ctx context.Context, partial []byte) (done bool, err error) {
	if lf.finishing {
		return true, nil
	}
	// An incomplete record is read again once it is whole.
	if _, err := lf.f.Seek(-int64(len(partial)), io.SeekCurrent); err != nil {
		return false, fmt.Errorf("seek in %s: %w", lf.path, err)
	}
	lf.r.Reset(lf.f)
	if lf.watcher == nil {
		// Data may have come before the watch started, so read again
		// before waiting.
		return false, lf.startWatch()
	}
	alive := false
	if lf.running != nil {
		if alive, err = lf.running(ctx); err != nil {
			return false, fmt.Errorf("check whether the container still runs: %w", err)
		}
	}
	if !alive {
		lf.finishing = true // drain what is left, then stop
		return false, nil
	}
	recreated, err := waitLogChange(ctx, lf.clk, lf.watcher, filepath.Base(lf.path))
	if err != nil || !recreated {
		return false, err
	}
	return false, lf.reopen()
}

// startWatch watches the log file's directory, which sees both writes to
// the file and its replacement.
func (lf *logFollower) startWatch() error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", lf.path, err)
	}
	lf.watcher = watcher
	if err := watcher.Add(filepath.Dir(lf.path)); err != nil {
		return fmt.Errorf("watch %s: %w", lf.path, err)
	}
	return nil
}

// reopen switches to the file now at the log path, reading it from its
// start. A path with no file yet is left for the next change to find.
func (lf *logFollower) reopen() error {
	nf, err := os.Open(lf.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("reopen %s: %w", lf.path, err)
	}
	lf.f.Close()
	lf.f = nf
	lf.r.Reset(lf.f)
	return nil
}

// waitLogChange blocks until the log directory changes, followRecheck
// passes or ctx ends. It reports whether the file was created anew
// (rotated), so the caller reopens it.
func waitLogChange(ctx context.Context, clk clock.Clock, w *fsnotify.Watcher, base string) (bool, error) {
	tick := clk.After(followRecheck)
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick:
			return false, nil
		case ev, ok := <-w.Events:
			if !ok {
				return false, errors.New("log watch closed")
			}
			if ev.Has(fsnotify.Create) {
				return filepath.Base(ev.Name) == base, nil
			}
			return false, nil
		case err, ok := <-w.Errors:
			if !ok {
				return false, errors.New("log watch closed")
			}
			return false, fmt.Errorf("watch log directory: %w", err)
		}
	}
}

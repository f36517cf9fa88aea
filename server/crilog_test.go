package server

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestParseCRILog(t *testing.T) {
	cases := []struct {
		name    string
		line    string
		stream  string
		content string
		wantErr bool
	}{
		{"full line", "2016-10-06T00:17:09.669794202Z stdout F hello world\n", "stdout", "hello world\n", false},
		{"partial line drops the separator", "2016-10-06T00:17:09.669794202Z stderr P part\n", "stderr", "part", false},
		{"more tags", "2016-10-06T00:17:09.669794202Z stdout P:x:y part\n", "stdout", "part", false},
		{"empty line", "2016-10-06T00:17:09.669794202Z stdout F \n", "stdout", "\n", false},
		{"offset time", "2016-10-06T02:17:09.5+02:00 stdout F x\n", "stdout", "x\n", false},
		{"spaces kept", "2016-10-06T00:17:09Z stdout F  a  b \n", "stdout", " a  b \n", false},
		{"no newline", "2016-10-06T00:17:09Z stdout F last", "stdout", "last", false},
		{"bad time", "yesterday stdout F x\n", "", "", true},
		{"bad stream", "2016-10-06T00:17:09Z stdin F x\n", "", "", true},
		{"no tag", "2016-10-06T00:17:09Z stdout\n", "", "", true},
		{"no content separator", "2016-10-06T00:17:09Z stdout F\n", "", "", true},
		{"empty", "", "", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := parseCRILog([]byte(tc.line))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (rec.stream != tc.stream || string(rec.content) != tc.content) {
				t.Fatalf("got %s %q, want %s %q", rec.stream, rec.content, tc.stream, tc.content)
			}
		})
	}
}

func FuzzParseCRILog(f *testing.F) {
	for _, s := range []string{
		"2016-10-06T00:17:09.669794202Z stdout F hello\n",
		"2016-10-06T00:17:09.669794202Z stderr P part\n",
		"2016-10-06T00:17:09Z stdout F:x \n",
		"2016-10-06T00:17:09+01:00 stdout F\x00\xff\n",
		"{\"log\":\"x\\n\",\"stream\":\"stdout\",\"time\":\"2016-10-20T18:39:20.57606443Z\"}\n",
		"",
		" ",
		"Z stdout F x",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := parseCRILog(line)
		if err != nil {
			return
		}
		// A parsed record is a suffix of the line, on a known stream,
		// with a real time.
		if rec.stream != streamStdout && rec.stream != streamStderr {
			t.Fatalf("stream %q", rec.stream)
		}
		if !bytes.Contains(line, rec.content) {
			t.Fatalf("content %q not in line %q", rec.content, line)
		}
		if rec.time.IsZero() && !bytes.HasPrefix(line, []byte("0001-01-01")) {
			t.Fatalf("zero time from %q", line)
		}
		// Re-encoding a whole record and parsing it again gives the same.
		if utf8.Valid(rec.content) && !bytes.ContainsRune(rec.content[:max(len(rec.content)-1, 0)], '\n') {
			tag := "F"
			content := rec.content
			if !bytes.HasSuffix(content, []byte("\n")) {
				tag = "P"
			}
			enc := rec.time.Format(time.RFC3339Nano) + " " + rec.stream + " " + tag + " " + string(content)
			if tag == "P" {
				enc += "\n"
			}
			again, err := parseCRILog([]byte(enc))
			if err != nil || again.stream != rec.stream || !bytes.Equal(again.content, rec.content) || !again.time.Equal(rec.time) {
				t.Fatalf("round trip of %q: %+v %v", enc, again, err)
			}
		}
		// The writer never writes more than the limit.
		limit := int64(len(line) / 2)
		var out bytes.Buffer
		w := &logWriter{stdout: &out, stderr: &out, opts: &logReadOptions{timestamps: true}, remain: limit, lineStart: true}
		_ = w.write(rec)
		if int64(out.Len()) > limit {
			t.Fatalf("wrote %d bytes over a limit of %d", out.Len(), limit)
		}
	})
}

// logFile writes records to a file in dir and returns its path.
func logFile(t *testing.T, dir string, records ...string) string {
	t.Helper()
	p := filepath.Join(dir, "0.log")
	if err := os.WriteFile(p, []byte(strings.Join(records, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func TestReadLog(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(sec int) string { return base.Add(time.Duration(sec) * time.Second).Format(time.RFC3339Nano) }
	records := []string{
		at(0) + " stdout F one\n",
		at(1) + " stderr F two\n",
		at(2) + " stdout P thr\n",
		at(2) + " stdout F ee\n",
		at(3) + " stdout F four\n",
	}
	path := logFile(t, t.TempDir(), records...)
	cases := []struct {
		name           string
		opts           logReadOptions
		noStdout       bool
		noStderr       bool
		want, wantErrW string
	}{
		{name: "all", want: "one\ntwo\nthree\nfour\n"},
		{name: "tail 2", opts: logReadOptions{tailLines: ptr[int64](2)}, want: "ee\nfour\n"},
		{name: "tail 0", opts: logReadOptions{tailLines: ptr[int64](0)}, want: ""},
		{name: "tail more than there are", opts: logReadOptions{tailLines: ptr[int64](100)}, want: "one\ntwo\nthree\nfour\n"},
		{name: "limit bytes cuts a line", opts: logReadOptions{limitBytes: ptr[int64](6)}, want: "one\ntw"},
		{name: "since", opts: logReadOptions{since: base.Add(2 * time.Second)}, want: "three\nfour\n"},
		{name: "timestamps once per line", opts: logReadOptions{timestamps: true, tailLines: ptr[int64](3)},
			want: at(2)[:19] + ".000000000Z thr" + "ee\n" + at(3)[:19] + ".000000000Z four\n"},
		{name: "stdout only", noStderr: true, want: "one\nthree\nfour\n"},
		{name: "stderr only", noStdout: true, want: "two\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var stdout, stderr io.Writer = &out, &out
			if tc.noStdout {
				stdout = nil
			}
			if tc.noStderr {
				stderr = nil
			}
			clk := clocktesting.NewFakeClock(base)
			if err := readLog(t.Context(), clk, path, tc.opts, nil, stdout, stderr); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReadLogDockerJSON(t *testing.T) {
	path := logFile(t, t.TempDir(),
		`{"log":"a\n","stream":"stdout","time":"2016-10-20T18:39:20.57606443Z"}`+"\n",
		`{"log":"b\n","stream":"stderr","time":"2016-10-20T18:39:21.57606443Z"}`+"\n")
	var out bytes.Buffer
	if err := readLog(t.Context(), clocktesting.NewFakeClock(time.Now()), path, logReadOptions{}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "a\nb\n" {
		t.Fatalf("got %q", out.String())
	}
}

func TestTailStart(t *testing.T) {
	cases := []struct {
		content string
		n       int64
		want    int64
	}{
		{"a\nb\nc\n", 0, 6}, {"a\nb\nc\n", 1, 4}, {"a\nb\nc\n", 2, 2}, {"a\nb\nc\n", 3, 0}, {"a\nb\nc\n", 9, 0},
		{"a\nb", 1, 0}, {"a\nb\nc", 1, 2}, {"", 3, 0}, {"abc", -1, 0},
	}
	for _, tc := range cases {
		got, err := tailStart(strings.NewReader(tc.content), tc.n)
		if err != nil || got != tc.want {
			t.Errorf("tailStart(%q, %d) = %d, %v; want %d", tc.content, tc.n, got, err, tc.want)
		}
	}
	// Across blocks.
	var b strings.Builder
	for i := 0; i < 3000; i++ {
		b.WriteString("0123456789\n")
	}
	got, err := tailStart(strings.NewReader(b.String()), 1000)
	if want := int64(2000 * 11); err != nil || got != want {
		t.Fatalf("tail across blocks = %d, %v; want %d", got, err, want)
	}
}

func TestReadLogFollow(t *testing.T) {
	dir := t.TempDir()
	rec := func(s string) string { return time.Now().UTC().Format(time.RFC3339Nano) + " stdout F " + s + "\n" }
	path := logFile(t, dir, rec("first"))
	appendLog := func(s string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Error(err)
		}
	}
	var running atomic.Bool
	running.Store(true)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	ctx := klog.NewContext(t.Context(), klog.Background())
	go func() {
		done <- readLog(ctx, clocktesting.NewFakeClock(time.Now()), path, logReadOptions{follow: true},
			func(context.Context) (bool, error) { return running.Load(), nil }, pw, pw)
		pw.Close()
	}()
	lines := bufio.NewReader(pr)
	expect := func(want string) {
		t.Helper()
		got, err := lines.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	expect("first\n")
	// A record written in two pieces is delivered once whole.
	full := rec("second")
	appendLog(full[:10])
	appendLog(full[10:])
	expect("second\n")
	// The container writes a last line and exits: the follow delivers the
	// line, notices the exit at the next change in the directory, and ends.
	appendLog(rec("last"))
	expect("last\n")
	running.Store(false)
	if err := os.WriteFile(path+".wake", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lines.ReadString('\n'); err != io.EOF {
		t.Fatalf("after the container stopped: %v, want EOF", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReadLogFollowStopsWithContext(t *testing.T) {
	path := logFile(t, t.TempDir(), time.Now().UTC().Format(time.RFC3339Nano)+" stdout F x\n")
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- readLog(ctx, clocktesting.NewFakeClock(time.Now()), path, logReadOptions{follow: true},
			func(context.Context) (bool, error) { return true, nil }, pw, pw)
	}()
	if l, err := bufio.NewReader(pr).ReadString('\n'); err != nil || l != "x\n" {
		t.Fatalf("%q %v", l, err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("follow ended without the context's error")
	}
}

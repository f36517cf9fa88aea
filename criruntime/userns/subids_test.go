package userns_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/criruntime/userns"
)

// fakeHost is a machine with or without a kubelet user and getsubids,
// answering getsubids with fixed outputs and recording the calls.
type fakeHost struct {
	user       bool
	userErr    error
	getsubids  bool
	uids, gids string
	runErr     error
	calls      [][]string
}

var _ userns.Host = (*fakeHost)(nil)

func (h *fakeHost) UserExists(_ context.Context, name string) (bool, error) {
	if name != "kubelet" {
		return false, nil
	}
	return h.user, h.userErr
}

func (h *fakeHost) LookPath(file string) (string, error) {
	if file != "getsubids" || !h.getsubids {
		return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
	}
	return "/usr/bin/getsubids", nil
}

func (h *fakeHost) Output(_ context.Context, path string, args ...string) ([]byte, error) {
	h.calls = append(h.calls, append([]string{path}, args...))
	if h.runErr != nil {
		return nil, h.runErr
	}
	if len(args) > 0 && args[0] == "-g" {
		return []byte(h.gids), nil
	}
	return []byte(h.uids), nil
}

// TestNodeRange: the kubelet user's subordinate IDs from getsubids, as
// upstream kubelet v1.37.2 reads them, or its default without that user;
// upstream's errors otherwise.
func TestNodeRange(t *testing.T) {
	const line = "0: kubelet 65536 2147483648\n"
	for _, tc := range []struct {
		name          string
		host          fakeHost
		perPod        uint32
		first, length uint32
		want          string // error; "" for success
		calls         [][]string
	}{
		{name: "no kubelet user: default", host: fakeHost{getsubids: true, uids: line, gids: line}, first: 65536, length: 1<<32 - 65536},
		{name: "no kubelet user: default for idsPerPod", host: fakeHost{}, perPod: 65536 * 4, first: 65536 * 4, length: 1<<32 - 65536*4},
		{name: "user lookup fails", host: fakeHost{userErr: errors.New("passwd unreadable")}, want: "passwd unreadable"},
		{name: "subids", host: fakeHost{user: true, getsubids: true, uids: line, gids: line}, first: 65536, length: 2147483648,
			calls: [][]string{{"/usr/bin/getsubids", "kubelet"}, {"/usr/bin/getsubids", "-g", "kubelet"}}},
		{name: "user without getsubids", host: fakeHost{user: true}, want: `exec: "getsubids": executable file not found in $PATH`},
		{name: "getsubids fails", host: fakeHost{user: true, getsubids: true, runErr: errors.New("exit status 1")},
			want: `error retrieving additional uids for user "kubelet": exit status 1`},
		{name: "uids and gids differ", host: fakeHost{user: true, getsubids: true, uids: line, gids: "0: kubelet 131072 65536\n"},
			want: `mismatched subuids and subgids for user "kubelet"`},
		{name: "two ranges", host: fakeHost{user: true, getsubids: true, uids: line + line, gids: line + line}, want: "it must contain only one line"},
		{name: "short line", host: fakeHost{user: true, getsubids: true, uids: "0: kubelet 65536\n", gids: "0: kubelet 65536\n"}, want: "invalid line"},
		{name: "not a number", host: fakeHost{user: true, getsubids: true, uids: "0: kubelet x 65536\n", gids: "0: kubelet x 65536\n"}, want: `error parsing line "0: kubelet x 65536\n"`},
		{name: "past 32 bits", host: fakeHost{user: true, getsubids: true, uids: "0: kubelet 65536 4294967296\n", gids: "0: kubelet 65536 4294967296\n"}, want: "error parsing line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, length, err := userns.NodeRange(t.Context(), &tc.host, tc.perPod)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("NodeRange: %d, %d, %v; want an error containing %q", first, length, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if first != tc.first || length != tc.length {
				t.Fatalf("NodeRange: %d+%d, want %d+%d", first, length, tc.first, tc.length)
			}
			if !reflect.DeepEqual(tc.host.calls, tc.calls) {
				t.Fatalf("ran %v, want %v", tc.host.calls, tc.calls)
			}
		})
	}
}

// TestNodeRangeChecked: a range from getsubids that upstream would refuse
// is refused by Config.Validate in upstream's words, and a good one hands
// out pods' ranges from its start.
func TestNodeRangeChecked(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		maxPods    int
		want       string
	}{
		{"first ID unaligned", "0: kubelet 100000 6553600\n", 0, "kubelet user assigned ID 100000 is not a multiple of 65536"},
		{"length unaligned", "0: kubelet 65536 100000\n", 0, "kubelet user assigned IDs length 100000 is not a multiple of 65536"},
		{"too small for maxPods", "0: kubelet 65536 655360\n", 110, "kubelet user assigned IDs are not enough to support 110 pods"},
		{"good", "0: kubelet 655360 7208960\n", 110, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, length, err := userns.NodeRange(t.Context(), &fakeHost{user: true, getsubids: true, uids: tc.line, gids: tc.line}, 0)
			if err != nil {
				t.Fatal(err)
			}
			a, err := userns.New(userns.Config{PodsDir: t.TempDir(), FirstID: first, Length: length, MaxPods: tc.maxPods})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("New: %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m, err := a.Get("pod-a")
			if err != nil {
				t.Fatal(err)
			}
			if m.Length != 65536 || m.HostID < first || uint64(m.HostID)+65536 > uint64(first)+uint64(length) || (m.HostID-first)%65536 != 0 {
				t.Fatalf("first pod's range %+v, want 65536 IDs inside the kubelet user's %d+%d", m, first, length)
			}
		})
	}
}

// The machine's user database, through getent and through os/user when
// getent is not on the PATH: root is known, a made-up name is not.
func TestOSHostUserExists(t *testing.T) {
	ctx := context.Background()
	check := func(how string) {
		t.Helper()
		if ok, err := (userns.OSHost{}).UserExists(ctx, "root"); !ok || err != nil {
			t.Errorf("%s: root: %v, %v; want true", how, ok, err)
		}
		if ok, err := (userns.OSHost{}).UserExists(ctx, "nodekit-no-such-user"); ok || err != nil {
			t.Errorf("%s: a missing user: %v, %v; want false, nil", how, ok, err)
		}
	}
	if _, err := exec.LookPath("getent"); err == nil {
		check("getent")
	} else if os.Getenv("NODEKIT_REQUIRE_INTEGRATION") != "" {
		t.Errorf("getent is not on the PATH: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	check("os/user")
}

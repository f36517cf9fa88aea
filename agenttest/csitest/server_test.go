package csitest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	testingclock "k8s.io/utils/clock/testing"
)

// A fail line naming a volume fails that volume's calls only; every call
// is logged with the time it came in.
func TestFailVolumeAndTimedCalls(t *testing.T) {
	dir := t.TempDir()
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC))
	s, err := NewServer(Config{Name: "d", NodeID: "n", StateDir: dir, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{StateDir: dir}
	if err := p.FailVolume("NodePublishVolume", "Internal", "vol-a"); err != nil {
		t.Fatal(err)
	}
	if err := p.Fail("NodeUnstageVolume", "Unavailable"); err != nil {
		t.Fatal(err)
	}
	err = s.enter("NodePublishVolume", "vol-a", "/a")
	if status.Code(err) != codes.Internal {
		t.Errorf("publish of vol-a: %v, want Internal", err)
	}
	clk.SetTime(clk.Now().Add(1500 * time.Millisecond))
	if err := s.enter("NodePublishVolume", "vol-b", "/b"); err != nil {
		t.Errorf("publish of vol-b: %v, want no failure", err)
	}
	if err := s.enter("NodeUnstageVolume", "vol-b", "/s"); status.Code(err) != codes.Unavailable {
		t.Errorf("unstage of vol-b: %v, want Unavailable (a line naming no volume)", err)
	}
	// RecoverVolume clears vol-a's publish failure only.
	if err := p.FailVolume("NodeStageVolume", "Internal", "vol-a"); err != nil {
		t.Fatal(err)
	}
	if err := p.RecoverVolume("NodePublishVolume", "vol-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.enter("NodePublishVolume", "vol-a", "/a"); err != nil {
		t.Errorf("publish of vol-a after RecoverVolume: %v", err)
	}
	if err := s.enter("NodeStageVolume", "vol-a", "/s"); status.Code(err) != codes.Internal {
		t.Errorf("stage of vol-a after RecoverVolume of its publish: %v, want Internal", err)
	}
	if err := s.enter("NodeUnstageVolume", "vol-b", "/s"); status.Code(err) != codes.Unavailable {
		t.Errorf("unstage of vol-b after RecoverVolume of vol-a: %v, want Unavailable", err)
	}
	if err := p.Recover(); err != nil {
		t.Fatal(err)
	}
	if err := s.enter("NodePublishVolume", "vol-a", "/a"); err != nil {
		t.Errorf("publish of vol-a after Recover: %v", err)
	}
	calls, err := p.TimedCalls()
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 7 || calls[1].Call != "NodePublishVolume vol-b /b" || calls[1].At.Sub(calls[0].At) != 1500*time.Millisecond {
		t.Errorf("timed calls %+v", calls)
	}
	plain, err := p.Calls()
	if err != nil || !slices.Equal(plain, []string{"NodePublishVolume vol-a /a", "NodePublishVolume vol-b /b", "NodeUnstageVolume vol-b /s", "NodePublishVolume vol-a /a", "NodeStageVolume vol-a /s", "NodeUnstageVolume vol-b /s", "NodePublishVolume vol-a /a"}) {
		t.Errorf("calls %q, %v", plain, err)
	}
	if _, err := os.Stat(filepath.Join(dir, FailFile)); !os.IsNotExist(err) {
		t.Errorf("fail file after Recover: %v", err)
	}
}

// A fail line with a count fails that many calls of the volume and no
// more; other volumes' calls do not spend it.
func TestFailVolumeTimes(t *testing.T) {
	dir := t.TempDir()
	s, err := NewServer(Config{Name: "d", NodeID: "n", StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{StateDir: dir}
	if err := p.FailVolumeTimes("NodePublishVolume", "Internal", "vol-a", 2); err != nil {
		t.Fatal(err)
	}
	var got []codes.Code
	for _, vol := range []string{"vol-a", "vol-b", "vol-a", "vol-b", "vol-a", "vol-a"} {
		got = append(got, status.Code(s.enter("NodePublishVolume", vol, "/"+vol)))
	}
	want := []codes.Code{codes.Internal, codes.OK, codes.Internal, codes.OK, codes.OK, codes.OK}
	if !slices.Equal(got, want) {
		t.Errorf("codes %v, want %v", got, want)
	}
	if err := p.appendFail("NodeStageVolume Internal vol-a many"); err != nil {
		t.Fatal(err)
	}
	if err := s.enter("NodeStageVolume", "vol-a", "/s"); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), `bad failure count "many"`) {
		t.Errorf("stage with a bad count: %v", err)
	}
}

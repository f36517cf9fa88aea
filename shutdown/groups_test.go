package shutdown

import (
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestGroups(t *testing.T) {
	type byPrio = kubeletv1beta1.ShutdownGracePeriodByPodPriority
	for _, tc := range []struct {
		name string
		cfg  GracePeriodConfig
		want []Group
	}{
		{name: "disabled", cfg: GracePeriodConfig{}, want: nil},
		{name: "total and critical", cfg: GracePeriodConfig{ShutdownGracePeriod: 30 * time.Second, ShutdownGracePeriodCriticalPods: 10 * time.Second},
			want: []Group{{0, 20}, {SystemCriticalPriority, 10}}},
		{name: "total only", cfg: GracePeriodConfig{ShutdownGracePeriod: 30 * time.Second},
			want: []Group{{0, 30}, {SystemCriticalPriority, 0}}},
		{name: "all critical", cfg: GracePeriodConfig{ShutdownGracePeriod: 30 * time.Second, ShutdownGracePeriodCriticalPods: 30 * time.Second},
			want: []Group{{0, 0}, {SystemCriticalPriority, 30}}},
		{name: "whole seconds", cfg: GracePeriodConfig{ShutdownGracePeriod: 2500 * time.Millisecond, ShutdownGracePeriodCriticalPods: time.Second},
			want: []Group{{0, 1}, {SystemCriticalPriority, 1}}},
		{name: "by priority, sorted", cfg: GracePeriodConfig{ShutdownGracePeriodByPodPriority: []byPrio{
			{Priority: 100000, ShutdownGracePeriodSeconds: 120},
			{Priority: 0, ShutdownGracePeriodSeconds: 60},
			{Priority: 10000, ShutdownGracePeriodSeconds: 180},
			{Priority: 2000000000, ShutdownGracePeriodSeconds: 10},
		}}, want: []Group{{0, 60}, {10000, 180}, {100000, 120}, {2000000000, 10}}},
		{name: "by priority, one", cfg: GracePeriodConfig{ShutdownGracePeriodByPodPriority: []byPrio{{Priority: 5, ShutdownGracePeriodSeconds: 7}}},
			want: []Group{{5, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Groups(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Groups = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGroupsInvalid(t *testing.T) {
	type byPrio = kubeletv1beta1.ShutdownGracePeriodByPodPriority
	for _, tc := range []struct {
		name string
		cfg  GracePeriodConfig
		want []string
	}{
		{name: "critical above total", cfg: GracePeriodConfig{ShutdownGracePeriod: 10 * time.Second, ShutdownGracePeriodCriticalPods: 20 * time.Second},
			want: []string{"shutdownGracePeriodCriticalPods 20s must be <= shutdownGracePeriod 10s"}},
		{name: "critical without total", cfg: GracePeriodConfig{ShutdownGracePeriodCriticalPods: 5 * time.Second},
			want: []string{"shutdownGracePeriodCriticalPods 5s must be <= shutdownGracePeriod 0s"}},
		{name: "negative total", cfg: GracePeriodConfig{ShutdownGracePeriod: -time.Second},
			want: []string{"shutdownGracePeriod -1s must be either zero or at least 1s"}},
		{name: "sub-second", cfg: GracePeriodConfig{ShutdownGracePeriod: 10 * time.Second, ShutdownGracePeriodCriticalPods: 500 * time.Millisecond},
			want: []string{"shutdownGracePeriodCriticalPods 500ms must be either zero or at least 1s"}},
		{name: "both forms", cfg: GracePeriodConfig{ShutdownGracePeriod: 10 * time.Second,
			ShutdownGracePeriodByPodPriority: []byPrio{{Priority: 0, ShutdownGracePeriodSeconds: 10}}},
			want: []string{"shutdownGracePeriodByPodPriority cannot be set together with shutdownGracePeriod"}},
		{name: "negative seconds", cfg: GracePeriodConfig{ShutdownGracePeriodByPodPriority: []byPrio{
			{Priority: 0, ShutdownGracePeriodSeconds: 10}, {Priority: 10, ShutdownGracePeriodSeconds: -1}}},
			want: []string{"shutdownGracePeriodByPodPriority[1].shutdownGracePeriodSeconds -1 must not be negative"}},
		{name: "repeated priority", cfg: GracePeriodConfig{ShutdownGracePeriodByPodPriority: []byPrio{
			{Priority: 7, ShutdownGracePeriodSeconds: 10}, {Priority: 0, ShutdownGracePeriodSeconds: 1}, {Priority: 7, ShutdownGracePeriodSeconds: 5}}},
			want: []string{"shutdownGracePeriodByPodPriority[2].priority 7 repeats shutdownGracePeriodByPodPriority[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Groups(tc.cfg)
			if err == nil {
				t.Fatalf("Groups = %v, want an error", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestAssign(t *testing.T) {
	groups := []Group{{0, 60}, {10000, 180}, {100000, 120}, {2000000000, 10}}
	for _, tc := range []struct {
		prio *int32
		want int
	}{
		{nil, 0}, {ptr.To[int32](-5), 0}, {ptr.To[int32](0), 0}, {ptr.To[int32](9999), 0},
		{ptr.To[int32](10000), 1}, {ptr.To[int32](50000), 1}, {ptr.To[int32](100000), 2},
		{ptr.To[int32](2000000000), 3}, {ptr.To[int32](2000001000), 3},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{Priority: tc.prio}}
		got := assign(groups, []*v1.Pod{pod})
		if len(got[tc.want]) != 1 {
			t.Errorf("priority %v: assigned %v, want group %d", ptr.Deref(tc.prio, 0), got, tc.want)
		}
	}
	// Lowest group above zero: lower pods still land in it.
	if got := groupIndex([]Group{{100, 1}, {200, 1}}, 0); got != 0 {
		t.Errorf("groupIndex below all = %d, want 0", got)
	}
	if got := assign(nil, []*v1.Pod{{}}); len(got) != 0 {
		t.Errorf("assign without groups = %v", got)
	}
}

func TestPodGracePeriod(t *testing.T) {
	pod := func(tgps *int64) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: tgps}}
	}
	for _, tc := range []struct {
		tgps   *int64
		period int64
		want   int64
	}{
		{nil, 20, 20}, {ptr.To[int64](5), 20, 5}, {ptr.To[int64](60), 20, 20}, {ptr.To[int64](20), 20, 20},
		{ptr.To[int64](0), 20, 0}, {ptr.To[int64](30), 0, 0},
	} {
		if got := podGracePeriod(pod(tc.tgps), tc.period); got != tc.want {
			t.Errorf("podGracePeriod(%v, %d) = %d, want %d", ptr.Deref(tc.tgps, -1), tc.period, got, tc.want)
		}
	}
}

func TestTotalGracePeriod(t *testing.T) {
	if got := TotalGracePeriod([]Group{{0, 20}, {SystemCriticalPriority, 10}}); got != 30*time.Second {
		t.Errorf("TotalGracePeriod = %v, want 30s", got)
	}
}

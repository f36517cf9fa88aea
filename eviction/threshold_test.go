package eviction

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseThresholds(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	tests := []struct {
		name    string
		cfg     ThresholdConfig
		want    []Threshold
		wantErr string
	}{
		{name: "empty"},
		{
			name: "upstream defaults",
			cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%",
				"nodefs.inodesFree": "5%", "imagefs.available": "15%"}},
			want: []Threshold{
				{Signal: SignalImageFsAvailable, Value: Value{Percentage: 0.15}},
				{Signal: SignalMemoryAvailable, Value: Value{Quantity: q("100Mi")}},
				{Signal: SignalNodeFsAvailable, Value: Value{Percentage: 0.1}},
				{Signal: SignalNodeFsInodesFree, Value: Value{Percentage: 0.05}},
			},
		},
		{
			name: "soft with grace and min reclaim",
			cfg: ThresholdConfig{
				Hard:            map[string]string{"pid.available": "1000"},
				Soft:            map[string]string{"memory.available": "1Gi"},
				SoftGracePeriod: map[string]string{"memory.available": "1m30s"},
				MinimumReclaim:  map[string]string{"memory.available": "500Mi", "pid.available": "5%"},
			},
			want: []Threshold{
				{Signal: SignalPIDAvailable, Value: Value{Quantity: q("1000")}, MinReclaim: &Value{Percentage: 0.05}},
				{Signal: SignalMemoryAvailable, Value: Value{Quantity: q("1Gi")}, GracePeriod: 90 * time.Second, MinReclaim: &Value{Quantity: q("500Mi")}},
			},
		},
		{name: "0% and 100% disable", cfg: ThresholdConfig{Hard: map[string]string{"nodefs.available": "0%", "imagefs.available": "100%"}}},
		{name: "unknown signal", cfg: ThresholdConfig{Hard: map[string]string{"memory.free": "1Gi"}}, wantErr: `evictionHard: unsupported eviction signal "memory.free"`},
		{name: "allocatable signal unsupported", cfg: ThresholdConfig{Hard: map[string]string{"allocatableMemory.available": "1Gi"}}, wantErr: "allocatableMemory.available"},
		{name: "bad quantity", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "lots"}}, wantErr: "evictionHard[memory.available]"},
		{name: "zero quantity", cfg: ThresholdConfig{Hard: map[string]string{"memory.available": "0"}}, wantErr: "evictionHard[memory.available]: threshold \"0\" must be positive"},
		{name: "negative quantity", cfg: ThresholdConfig{Soft: map[string]string{"memory.available": "-1Gi"}}, wantErr: "evictionSoft[memory.available]"},
		{name: "percentage over 100", cfg: ThresholdConfig{Hard: map[string]string{"nodefs.available": "101%"}}, wantErr: "evictionHard[nodefs.available]: percentage"},
		{name: "bad percentage", cfg: ThresholdConfig{Hard: map[string]string{"nodefs.available": "x%"}}, wantErr: "evictionHard[nodefs.available]: invalid percentage"},
		{name: "soft without grace", cfg: ThresholdConfig{Soft: map[string]string{"nodefs.available": "20%"}}, wantErr: "grace period must be specified for the soft eviction threshold nodefs.available"},
		{name: "bad grace", cfg: ThresholdConfig{Soft: map[string]string{"nodefs.available": "20%"}, SoftGracePeriod: map[string]string{"nodefs.available": "soon"}}, wantErr: "evictionSoftGracePeriod[nodefs.available]"},
		{name: "negative grace", cfg: ThresholdConfig{SoftGracePeriod: map[string]string{"nodefs.available": "-1s"}}, wantErr: "must not be negative"},
		{name: "grace unknown signal", cfg: ThresholdConfig{SoftGracePeriod: map[string]string{"disk": "1s"}}, wantErr: `evictionSoftGracePeriod: unsupported eviction signal "disk"`},
		{name: "min reclaim negative", cfg: ThresholdConfig{MinimumReclaim: map[string]string{"nodefs.available": "-1Gi"}}, wantErr: "evictionMinimumReclaim[nodefs.available]"},
		{name: "min reclaim zero percent", cfg: ThresholdConfig{MinimumReclaim: map[string]string{"nodefs.available": "0%"}}, wantErr: "evictionMinimumReclaim[nodefs.available]: percentage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseThresholds(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if !g.equal(w) || (g.MinReclaim == nil) != (w.MinReclaim == nil) || (g.MinReclaim != nil && !g.MinReclaim.equal(*w.MinReclaim)) {
					t.Errorf("threshold %d = %v (min %v), want %v (min %v)", i, g, g.MinReclaim, w, w.MinReclaim)
				}
			}
		})
	}
}

func TestValueAmount(t *testing.T) {
	q := resource.MustParse("1Ki")
	if got := (Value{Quantity: &q}).Amount(1 << 30); got != 1024 {
		t.Errorf("quantity amount = %d", got)
	}
	if got := (Value{Percentage: 0.1}).Amount(1000); got != 100 {
		t.Errorf("percentage amount = %d", got)
	}
}

package logs

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const log = "/pods/p/c/0.log"
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.Local)
	const rotated = log + ".20260301-120000"
	r := func(ts string) string { return log + "." + ts }
	cases := []struct {
		name     string
		size     int64
		siblings []string
		policy   Policy
		want     Plan
	}{
		{name: "below max size", size: 99, policy: Policy{MaxSize: 100, MaxFiles: 5}, want: Plan{}},
		{name: "at max size, first rotation", size: 100, policy: Policy{MaxSize: 100, MaxFiles: 5}, want: Plan{RotateTo: rotated}},
		{
			name: "the last rotated file is compressed now", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 5},
			siblings: []string{r("20260301-100000.gz"), r("20260301-110000")},
			want:     Plan{Compress: []string{r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "room for exactly MaxFiles", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 5},
			siblings: []string{r("20260301-110000"), r("20260301-090000.gz"), r("20260301-100000.gz")},
			want:     Plan{Compress: []string{r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "oldest removed beyond MaxFiles", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 5},
			siblings: []string{r("20260301-110000"), r("20260301-080000.gz"), r("20260301-090000.gz"), r("20260301-100000.gz")},
			want:     Plan{Remove: []string{r("20260301-080000.gz")}, Compress: []string{r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "MaxFiles lowered: several removed", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 3},
			siblings: []string{r("20260301-110000"), r("20260301-080000.gz"), r("20260301-090000.gz"), r("20260301-100000.gz")},
			want: Plan{Remove: []string{r("20260301-080000.gz"), r("20260301-090000.gz"), r("20260301-100000.gz")},
				Compress: []string{r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "MaxFiles 2 keeps no older rotated file", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 2},
			siblings: []string{r("20260301-100000.gz"), r("20260301-110000")},
			want:     Plan{Remove: []string{r("20260301-100000.gz"), r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "leftovers of an interrupted compression", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 5},
			siblings: []string{r("20260301-100000"), r("20260301-100000.gz"), r("20260301-110000"), r("20260301-110000.tmp")},
			want: Plan{Remove: []string{r("20260301-100000"), r("20260301-110000.tmp")},
				Compress: []string{r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "leftovers do not count against MaxFiles", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 3},
			siblings: []string{r("20260301-110000.tmp"), r("20260301-110000")},
			want:     Plan{Remove: []string{r("20260301-110000.tmp")}, Compress: []string{r("20260301-110000")}, RotateTo: rotated},
		},
		{
			name: "already rotated this second", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 5},
			siblings: []string{rotated}, want: Plan{Postponed: true},
		},
		{
			name: "already rotated and compressed this second", size: 200, policy: Policy{MaxSize: 100, MaxFiles: 5},
			siblings: []string{rotated + ".gz", r("20260301-120001")}, want: Plan{Postponed: true},
		},
		{name: "MaxSize 0 rotates even an empty log", size: 0, policy: Policy{MaxSize: 0, MaxFiles: 5}, want: Plan{RotateTo: rotated}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(log, tc.size, tc.siblings, now, tc.policy)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide =\n%+v\nwant\n%+v", got, tc.want)
			}
			if got.RotateTo == "" {
				return
			}
			// What remains after the plan: never more than MaxFiles.
			left := 2 // the file rotated now and the new current file
			for _, f := range tc.siblings {
				if !slices.Contains(got.Remove, f) && inUse(f, tc.siblings) {
					left++
				}
			}
			if left > tc.policy.MaxFiles {
				t.Errorf("%d files remain, more than MaxFiles %d", left, tc.policy.MaxFiles)
			}
		})
	}
}

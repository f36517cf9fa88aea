package stats_test

import (
	"fmt"
	"time"

	"github.com/nodekit/nodekit/stats"
)

func Example() {
	// Two cumulative CPU readings two seconds apart: one core-second used,
	// so the rate is half a core.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rate, ok := stats.NanoCores(
		stats.CPUSample{UsageCoreNanoSeconds: 3e9, At: t0},
		stats.CPUSample{UsageCoreNanoSeconds: 4e9, At: t0.Add(2 * time.Second)})
	fmt.Println(rate, ok)

	// The machine's memory, as eviction's memory.available sees it.
	mem, err := stats.Machine{}.Memory()
	fmt.Println(err == nil && mem.Available+mem.WorkingSet == mem.Capacity)
	// Output:
	// 500000000 true
	// true
}

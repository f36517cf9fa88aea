package logs_test

import (
	"fmt"
	"time"

	"github.com/nodekit/nodekit/logs"
)

// Decide plans one rotation: here a 12 MiB log with four rotated files,
// the newest not compressed yet, under the default policy (10Mi, 5 files).
func ExampleDecide() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	plan := logs.Decide("/var/log/pods/ns_web_uid/app/0.log", 12<<20, []string{
		"/var/log/pods/ns_web_uid/app/0.log.20260301-110000.gz",
		"/var/log/pods/ns_web_uid/app/0.log.20260301-112000.gz",
		"/var/log/pods/ns_web_uid/app/0.log.20260301-113000.gz",
		"/var/log/pods/ns_web_uid/app/0.log.20260301-114000",
	}, now, logs.Policy{MaxSize: 10 << 20, MaxFiles: 5})
	fmt.Println("remove:", plan.Remove)
	fmt.Println("compress:", plan.Compress)
	fmt.Println("rotate to:", plan.RotateTo)
	// Output:
	// remove: [/var/log/pods/ns_web_uid/app/0.log.20260301-110000.gz]
	// compress: [/var/log/pods/ns_web_uid/app/0.log.20260301-114000]
	// rotate to: /var/log/pods/ns_web_uid/app/0.log.20260301-120000
}

package dratest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// TestWatchHealthStatus: every device Healthy without a health file; a
// device the file marks Unhealthy is reported so within a poll, with its
// message; nothing more until the 10 s resend; the watch ends with ctx.
func TestWatchHealthStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newTestDriver(t)
		ctx, cancel := context.WithCancel(t.Context())
		reports := make(chan kubeletplugin.DeviceHealthReport, 10)
		done := make(chan error)
		go func() { done <- d.WatchHealthStatus(ctx, reports) }()
		synctest.Wait()
		take := func(what string, want int) []kubeletplugin.DeviceHealthReport {
			t.Helper()
			var got []kubeletplugin.DeviceHealthReport
			for len(reports) > 0 {
				got = append(got, <-reports)
			}
			if len(got) != want {
				t.Fatalf("%s: %d reports, want %d", what, len(got), want)
			}
			return got
		}
		r := take("at start", 1)[0]
		if len(r.Devices) != 2 || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy || r.Devices[1].Health != kubeletplugin.HealthStatusHealthy || r.Devices[0].PoolName != "n1" {
			t.Fatalf("first report %+v, want dev-0 and dev-1 of pool n1 Healthy", r)
		}
		if err := WriteHealth(d.cfg.StateDir, map[string]DeviceHealth{"dev-1": {Health: v1.ResourceHealthStatusUnhealthy, Message: "overheated"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		r = take("after the file changed", 1)[0]
		if dev := r.Devices[1]; dev.DeviceName != "dev-1" || dev.Health != kubeletplugin.HealthStatusUnhealthy || dev.Message != "overheated" || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
			t.Errorf("report %+v, want dev-1 Unhealthy (overheated), dev-0 Healthy", r)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		take("a second later, no change", 0)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		take("after 10 s", 1)
		if err := WriteHealth(d.cfg.StateDir, nil); err != nil { // "null": every device Healthy
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		if r := take("after the file was emptied", 1)[0]; r.Devices[1].Health != kubeletplugin.HealthStatusHealthy || r.Devices[1].Message != "" {
			t.Errorf("report %+v, want dev-1 Healthy again", r)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		take("a second after that", 0)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchHealthStatus = %v, want nil at ctx's end", err)
		}
	})
}

package pluginwatcher

import "github.com/prometheus/client_golang/prometheus"

var totalPluginsDesc = prometheus.NewDesc(
	"plugin_manager_total_plugins",
	"Number of plugins in Plugin Manager",
	[]string{"socket_path", "state"}, nil,
)

// collector reports upstream's plugin_manager_total_plugins: one series
// per socket in the desired state (sockets seen) and in the actual state
// (plugins registered).
type collector struct{ w *Watcher }

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- totalPluginsDesc }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	for path := range c.w.actual {
		ch <- prometheus.MustNewConstMetric(totalPluginsDesc, prometheus.GaugeValue, 1, path, "actual_state_of_world")
	}
	for path := range c.w.desired {
		ch <- prometheus.MustNewConstMetric(totalPluginsDesc, prometheus.GaugeValue, 1, path, "desired_state_of_world")
	}
}

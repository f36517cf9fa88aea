package volumemgr

import (
	"github.com/prometheus/client_golang/prometheus"
)

// QualifiedNamer is an optional Plugin capability: the plugin name a volume
// set up in dir is counted under in volume_manager_total_volumes, as
// upstream's fully qualified names ("kubernetes.io/csi:DRIVER"). Without
// it a volume counts under the plugin's Name.
type QualifiedNamer interface {
	QualifiedName(dir string) string
}

// pluginNotAvailable is upstream's plugin_name of a volume no plugin
// handles.
const pluginNotAvailable = "N/A"

var totalVolumesDesc = prometheus.NewDesc("volume_manager_total_volumes", "[ALPHA] Number of volumes in Volume Manager",
	[]string{"plugin_name", "state"}, nil)

type totalVolumes struct{ m *Manager }

// RegisterMetrics registers volume_manager_total_volumes{plugin_name,state}
// with reg: per plugin, the pod volumes of the desired state
// ("desired_state_of_world": the pods given, the volumes their containers
// mount; "N/A" for those no plugin handles) and of the actual state
// ("actual_state_of_world": the volumes set up). A scrape reads the
// manager's state and, for QualifiedNamer plugins, their volume files; it
// calls no driver.
func (m *Manager) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(totalVolumes{m})
}

func (c totalVolumes) Describe(ch chan<- *prometheus.Desc) { ch <- totalVolumesDesc }

func (c totalVolumes) Collect(ch chan<- prometheus.Metric) {
	type counted struct {
		state  string
		plugin Plugin
		dir    string // set up there; "" when not
	}
	var vols []counted
	m := c.m
	m.mu.Lock()
	for uid, d := range m.desired {
		for name, vol := range d.volumes {
			v := counted{state: "desired_state_of_world", plugin: m.pluginFor(vol)}
			if a := m.actual[uid]; a != nil && a.volumes[name] != nil && a.volumes[name].setUp {
				v.dir = a.volumes[name].dir
			}
			vols = append(vols, v)
		}
	}
	for _, a := range m.actual {
		for _, v := range a.volumes {
			if v.setUp {
				vols = append(vols, counted{state: "actual_state_of_world", plugin: v.plugin, dir: v.dir})
			}
		}
	}
	m.mu.Unlock()
	counts := map[[2]string]int{}
	for _, v := range vols {
		name := pluginNotAvailable
		if v.plugin != nil {
			name = v.plugin.Name()
			if q, ok := v.plugin.(QualifiedNamer); ok && v.dir != "" {
				name = q.QualifiedName(v.dir)
			}
		}
		counts[[2]string{name, v.state}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(totalVolumesDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

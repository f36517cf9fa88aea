package main

import (
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/pflag"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/version"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/server"
)

// zpages fills /statusz and /flagz, which kubelet v1.37 serves by default
// (ComponentStatusz, ComponentFlagz: beta, on): the process start, the
// binary and emulation versions, and the command line's flags with their
// values (every flag, as kubelet lists its flag sets). Either gate off in
// featureGates leaves its page out, as upstream.
func zpages(o *options, gates featuregate.FeatureGate, sc *server.Config) {
	v := version.Get()
	binary := strings.TrimPrefix(v.GitVersion, "v")
	if i := strings.IndexAny(binary, "-+"); i >= 0 {
		binary = binary[:i]
	}
	emulation := ""
	if v.Major != "" && v.Minor != "" {
		emulation = v.Major + "." + strings.TrimSuffix(v.Minor, "+")
	}
	goVersion := v.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	if gates.Enabled("ComponentStatusz") {
		sc.Statusz = &server.Statusz{ComponentName: "kubelet", StartTime: processStart(), BinaryVersion: binary,
			EmulationVersion: emulation, GoVersion: goVersion}
	}
	if !gates.Enabled("ComponentFlagz") {
		return
	}
	args := o.args
	sc.Flagz = func() map[string]string {
		fs := newFlagSet(&options{}, &kubeletv1beta1.KubeletConfiguration{}, io.Discard)
		flags := map[string]string{}
		if err := fs.Parse(args); err != nil {
			return flags // parsed at start; cannot fail now
		}
		fs.VisitAll(func(f *pflag.Flag) { flags[f.Name] = f.Value.String() })
		return flags
	}
}

// processStart is when this process started (/proc/self/stat), or now.
func processStart() time.Time {
	if p, err := procfs.Self(); err == nil {
		if st, err := p.Stat(); err == nil {
			if t, err := st.StartTime(); err == nil {
				return time.Unix(int64(t), 0)
			}
		}
	}
	return time.Now()
}

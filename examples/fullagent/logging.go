package main

import (
	"fmt"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// applyLogJSON is --log-json, an alias of --logging-format=json kept for
// command lines written before fullagent took kubelet's logging flags.
// Given with --logging-format set to another format, it is an error.
func applyLogJSON(fs *pflag.FlagSet, logJSON bool, cfg *kubeletv1beta1.KubeletConfiguration) error {
	if !logJSON {
		return nil
	}
	if fs.Changed("logging-format") && cfg.Logging.Format != logsapi.JSONLogFormat {
		return fmt.Errorf("--log-json is --logging-format=json, but --logging-format=%s was given too", cfg.Logging.Format)
	}
	cfg.Logging.Format = logsapi.JSONLogFormat
	return nil
}

// Package pluginwatchertest serves the registration side of the kubelet
// plugin-registration protocol (pluginregistration v1 Registration) on a
// socket in the watched directory: what a test driver embeds, the role
// node-driver-registrar plays for a real CSI driver. It answers GetInfo
// with the PluginInfo it was given and records every
// NotifyRegistrationStatus the watcher sends.
package pluginwatchertest

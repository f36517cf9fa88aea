// Package pluginwatcher is the kubelet plugin watcher, as upstream's
// plugin manager (pkg/kubelet/pluginmanager): it watches
// <rootDir>/plugins_registry (Options.Dir, created 0750) and its
// subdirectories for unix sockets, the ones present at start included,
// dials each one, asks it for its PluginInfo (pluginregistration v1
// Registration.GetInfo), hands it to the Handler of its type (CSIPlugin,
// DRAPlugin: ValidatePlugin, then RegisterPlugin) and tells the plugin
// the outcome (NotifyRegistrationStatus). The endpoint a handler is given
// is the info's Endpoint, or the registration socket when that is empty.
//
// A socket that goes away is deregistered (DeRegisterPlugin); a socket
// re-created at the same path (another inode or modification time: the
// role of upstream's per-event timestamp) is deregistered and registered
// again. A plugin of a type no handler serves is told so
// (PluginRegistered false, upstream's "no handler registered for plugin
// type" error) and nothing is registered. Every failed registration
// (dial, GetInfo, unknown type, validation, registration, notification)
// is retried with upstream's exponential back-off (500ms doubling to
// 2m2s); a re-created socket starts afresh. Dot-files and files that are
// not sockets are ignored.
//
// Registrations of different sockets run in parallel within one
// Reconcile step; Run calls the step on every filesystem event and every
// Options.ResyncPeriod (1s, upstream's reconciler period), so back-off
// deadlines are met to within a period. Deregistrations run before
// registrations, as upstream. Registered lists what is registered, and
// Options.Registerer, when set, gets upstream's
// plugin_manager_total_plugins{socket_path,state} gauge (computed from
// the state at scrape time).
//
// It does not own the plugin kinds (a CSI or DRA package implements
// Handler, structurally), device plugins (devicemgr serves their own
// v1beta1 registration), nor the plugins' own gRPC services. Like
// upstream, it deregisters nothing when it stops: plugins stay registered
// with their handlers for the agent's lifetime.
//
// How an agent wires it:
//
//	w, err := pluginwatcher.New(pluginwatcher.Options{
//		Dir:      filepath.Join(rootDir, "plugins_registry"),
//		Handlers: map[string]pluginwatcher.Handler{"CSIPlugin": csi, "DRAPlugin": dra},
//	})
//	go w.Run(ctx) // until ctx is done
//
// pluginwatchertest serves the registration side a driver embeds (the
// part node-driver-registrar plays for a CSI driver).
package pluginwatcher

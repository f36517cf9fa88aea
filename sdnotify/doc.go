// Package sdnotify tells systemd how a node agent run as a Type=notify
// service is doing, as upstream kubelet does: Notifier sends sd_notify
// messages ("READY=1" once the agent runs) to the datagram socket systemd
// names in $NOTIFY_SOCKET, and Watchdog pets systemd's watchdog
// ("WATCHDOG=1") every half of $WATCHDOG_USEC while the agent's health
// checks pass, as upstream's SystemdWatchdog (GA): a watchdog timeout of
// 1s or less is refused, a failed send is retried twice (1s, then 2s
// later), and an unhealthy agent is not vouched for, so systemd restarts
// it when the timeout runs out.
//
// It does not read the environment itself (the caller passes getenv and
// its pid), start or stop anything, or decide what healthy means (the
// caller's Check does). A process without $NOTIFY_SOCKET gets a Notifier
// that sends nothing and says so.
//
// How an agent wires it:
//
//	n := sdnotify.FromEnv(os.Getenv)
//	timeout, err := sdnotify.WatchdogTimeout(os.Getenv, os.Getpid())
//	w, err := sdnotify.NewWatchdog(sdnotify.WatchdogConfig{
//		Notifier: n, Timeout: timeout, Check: loop.Healthy,
//	})
//	// Once the node is registered and the loop runs:
//	sent, err := n.Notify(ctx, sdnotify.Ready)
//	go w.Run(ctx) // returns at once when the watchdog is off
package sdnotify

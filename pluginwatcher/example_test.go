package pluginwatcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/pluginwatcher"
	"github.com/nodekit/nodekit/pluginwatcher/pluginwatchertest"
)

// printHandler is a plugin kind that prints what it is asked.
type printHandler struct{ gone chan<- string }

func (printHandler) ValidatePlugin(_ context.Context, name, _ string, versions []string) error {
	fmt.Println("validate", name, versions)
	return nil
}

func (printHandler) RegisterPlugin(_ context.Context, name, _ string, _ []string) error {
	fmt.Println("register", name)
	return nil
}

func (h printHandler) DeRegisterPlugin(_ context.Context, name, _ string) {
	fmt.Println("deregister", name)
	h.gone <- name
}

func Example() {
	root, _ := os.MkdirTemp("", "pw")
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "plugins_registry")
	gone := make(chan string, 1)
	w, err := pluginwatcher.New(pluginwatcher.Options{
		Dir:      dir,
		Handlers: map[string]pluginwatcher.Handler{pluginwatcher.CSIPlugin: printHandler{gone: gone}},
		Logger:   logr.Discard(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()

	// A driver's registrar appears in the directory...
	_ = os.MkdirAll(dir, 0o750)
	r := pluginwatchertest.New(filepath.Join(dir, "csi.example.com-reg.sock"), &registerapi.PluginInfo{
		Type: pluginwatcher.CSIPlugin, Name: "csi.example.com", Endpoint: "/var/lib/kubelet/plugins/csi.example.com/csi.sock",
		SupportedVersions: []string{"1.0.0"},
	})
	if err := r.Start(); err != nil {
		fmt.Println(err)
		return
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	s, _ := r.WaitStatus(wctx)
	fmt.Println("registered:", s.PluginRegistered)
	for len(w.Registered()) == 0 { // the watcher records it after telling the plugin
		time.Sleep(time.Millisecond)
	}
	fmt.Println(w.Registered()[0].Endpoint)

	// ...and goes away.
	r.Stop()
	<-gone
	cancel()
	if err := <-done; err != nil {
		fmt.Println(err)
	}
	// Output:
	// validate csi.example.com [1.0.0]
	// register csi.example.com
	// registered: true
	// /var/lib/kubelet/plugins/csi.example.com/csi.sock
	// deregister csi.example.com
}

package csi

import (
	"context"
	"os"
)

// wantedVolume is a persistent volume a pod volume directory wants: its
// driver and handle, and its PV name when it is a raw block volume.
type wantedVolume struct {
	driver, handle, blockSpec string
}

// want records that the pod volume directory dir (SetUpRequest.Dir) wants
// the persistent volume src, from its first set-up that got the volume's
// lock (and past the SELinux label check, which upstream makes in its
// desired state) until its tear-down, published or not: the volume stays
// staged while a pod on the node wants it, as upstream keeps a device
// mounted while its desired state has a pod for it (a second pod of a
// ReadWriteOncePod volume waiting for the first to go publishes it
// without a new stage). The caller holds the volume's lock.
func (p *Plugin) want(src *source, dir string) {
	if src.pv == nil {
		return // inline volumes are not staged
	}
	w := wantedVolume{driver: src.driver, handle: src.handle}
	if src.block {
		w.blockSpec = src.pv.Name
	}
	p.wantedMu.Lock()
	defer p.wantedMu.Unlock()
	p.wanted[dir] = w
}

// unwant forgets what dir wanted and returns it.
func (p *Plugin) unwant(dir string) (wantedVolume, bool) {
	p.wantedMu.Lock()
	defer p.wantedMu.Unlock()
	w, ok := p.wanted[dir]
	delete(p.wanted, dir)
	return w, ok
}

// isWanted reports whether a pod volume directory wants the volume.
func (p *Plugin) isWanted(driver, handle string) bool {
	p.wantedMu.Lock()
	defer p.wantedMu.Unlock()
	for _, w := range p.wanted {
		if w.driver == driver && w.handle == handle {
			return true
		}
	}
	return false
}

// unstageUnwanted unstages w, which a pod wanted and never published,
// once no other pod wants or publishes it: the last pod of a volume may
// be one whose set-up never got as far as publishing.
func (p *Plugin) unstageUnwanted(ctx context.Context, w wantedVolume) error {
	if p.isWanted(w.driver, w.handle) {
		return nil
	}
	defer p.lock(w.driver, w.handle)()
	c, err := p.tearDownClient(w.driver) // teardown.go
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if w.blockSpec == "" {
		return p.unstageIfUnused(ctx, c, w.driver, w.handle)
	}
	inUse, err := p.blockPublishedElsewhere(w.blockSpec, w.driver, w.handle)
	if err != nil || inUse {
		return err
	}
	staging := p.blockStagingPath(w.blockSpec)
	if _, err := os.Stat(staging); err == nil {
		if err := p.unstageBlock(ctx, c, w.driver, w.handle, staging); err != nil {
			return err
		}
	}
	return p.removeBlockFiles(w.blockSpec)
}

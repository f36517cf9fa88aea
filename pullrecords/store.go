package pullrecords

import (
	"context"

	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/lru"
)

// Upper bounds of the in-memory caches, as kubelet's.
const (
	maxIntentsCache = 1024
	maxRecordsCache = 2000
)

// store is the record files behind two write-through in-memory caches of
// bounded size (least recently used entries go first), as kubelet keeps
// them: a lookup that hits reads no file. A cache is authoritative (a
// miss means there is no such file) while everything on disk fits in it:
// from a full listing at start that found no broken file until the first
// entry is dropped for room. Otherwise a miss reads the file. The
// caller (the Verifier) holds its lock around every call.
type store struct {
	files   *files
	intents *boundedCache[struct{}]                         // by image
	records *boundedCache[kubeletv1beta1.ImagePulledRecord] // by image ID
	m       *metrics
}

// boundedCache is an LRU cache with kubelet's authoritative flag.
type boundedCache[V any] struct {
	lru           *lru.Cache
	max           int
	authoritative bool
}

func newBoundedCache[V any](size int) *boundedCache[V] {
	return &boundedCache[V]{lru: lru.New(size), max: size}
}

func (c *boundedCache[V]) get(key string) (*V, bool) {
	v, ok := c.lru.Get(key)
	if !ok {
		return nil, false
	}
	return v.(*V), true
}

// set adds or replaces key; dropping another entry for room ends the
// cache's authority.
func (c *boundedCache[V]) set(key string, v *V) {
	if _, ok := c.lru.Get(key); !ok && c.lru.Len() >= c.max {
		c.authoritative = false
	}
	c.lru.Add(key, v)
}

func (c *boundedCache[V]) remove(key string) { c.lru.Remove(key) }

func (c *boundedCache[V]) usagePercent() float64 { return float64(c.lru.Len() * 100 / c.max) }

// cacheSizes are kubelet's: twice the pods or the parallel pulls for
// intents, five records per pod, within the upper bounds.
func cacheSizes(maxPods, maxParallelPulls int) (intents, records int) {
	if maxPods <= 0 {
		maxPods = 110 // kubelet's default maxPods
	}
	intents = min(max(2*maxPods, 2*maxParallelPulls), maxIntentsCache)
	records = min(5*maxPods, maxRecordsCache)
	return intents, records
}

func newStore(ctx context.Context, f *files, m *metrics, maxPods, maxParallelPulls int) *store {
	ni, nr := cacheSizes(maxPods, maxParallelPulls)
	s := &store{files: f, intents: newBoundedCache[struct{}](ni), records: newBoundedCache[kubeletv1beta1.ImagePulledRecord](nr), m: m}
	s.warm(ctx)
	return s
}

// warm fills the caches from a full listing; each becomes authoritative
// when its listing had no error and fits.
func (s *store) warm(ctx context.Context) {
	logger := klog.FromContext(ctx)
	images, err := s.files.intents()
	if err != nil {
		logger.Info("Errors listing image pull intents; the in-memory cache of intents is not authoritative", "err", err)
	}
	for _, img := range images[:min(len(images), s.intents.max)] {
		s.intents.set(img, &struct{}{})
	}
	s.intents.authoritative = err == nil && len(images) < s.intents.max
	recs, err := s.files.records()
	if err != nil {
		logger.Info("Errors listing image pulled records; the in-memory cache of records is not authoritative", "err", err)
	}
	for _, rec := range recs[:min(len(recs), s.records.max)] {
		s.records.set(rec.ImageRef, rec)
	}
	s.records.authoritative = err == nil && len(recs) < s.records.max
	s.countIntents(ctx)
	s.countRecords(ctx)
}

// record is the record of imageRef, nil when there is none; a file that
// does not decode is an error. The record is shared with the cache: the
// caller copies it before changing it.
func (s *store) record(imageRef string) (*kubeletv1beta1.ImagePulledRecord, error) {
	if rec, ok := s.records.get(imageRef); ok {
		return rec, nil
	}
	if s.records.authoritative {
		return nil, nil
	}
	rec, err := s.files.record(imageRef)
	if err == nil && rec != nil {
		s.records.set(imageRef, rec)
	}
	return rec, err
}

func (s *store) writeRecord(ctx context.Context, rec *kubeletv1beta1.ImagePulledRecord) error {
	if err := s.files.writeRecord(rec); err != nil {
		return err
	}
	s.records.set(rec.ImageRef, rec)
	s.countRecords(ctx)
	return nil
}

func (s *store) deleteRecord(ctx context.Context, imageRef string) error {
	if err := s.files.deleteRecord(imageRef); err != nil {
		return err
	}
	s.records.remove(imageRef)
	s.countRecords(ctx)
	return nil
}

func (s *store) intentExists(image string) (bool, error) {
	if _, ok := s.intents.get(image); ok {
		return true, nil
	}
	if s.intents.authoritative {
		return false, nil
	}
	ok, err := s.files.intentExists(image)
	if err == nil && ok {
		s.intents.set(image, &struct{}{})
	}
	return ok, err
}

func (s *store) writeIntent(ctx context.Context, image string) error {
	if err := s.files.writeIntent(image); err != nil {
		return err
	}
	s.intents.set(image, &struct{}{})
	s.countIntents(ctx)
	return nil
}

func (s *store) deleteIntent(ctx context.Context, image string) error {
	if err := s.files.deleteIntent(image); err != nil {
		return err
	}
	s.intents.remove(image)
	s.countIntents(ctx)
	return nil
}

// countIntents and countRecords set the gauges after a change: the files
// on disk (a directory that cannot be read leaves the gauge as it was)
// and the caches' use.
func (s *store) countIntents(ctx context.Context) {
	if n, err := count(s.files.pulling); err != nil {
		klog.FromContext(ctx).V(4).Info("Failed to count image pull intents", "err", err)
	} else {
		s.m.ondiskIntents.Set(float64(n))
	}
	s.m.memIntents.Set(s.intents.usagePercent())
}

func (s *store) countRecords(ctx context.Context) {
	if n, err := count(s.files.pulled); err != nil {
		klog.FromContext(ctx).V(4).Info("Failed to count image pulled records", "err", err)
	} else {
		s.m.ondiskRecords.Set(float64(n))
	}
	s.m.memRecords.Set(s.records.usagePercent())
}

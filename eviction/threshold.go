package eviction

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal names a resource the node can run short of, spelled as in the
// upstream --eviction-hard flag and KubeletConfiguration.evictionHard keys.
type Signal string

// The signals nodekit observes.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// Signals lists the supported signals in a fixed order.
func Signals() []Signal {
	return []Signal{SignalMemoryAvailable, SignalNodeFsAvailable, SignalNodeFsInodesFree,
		SignalImageFsAvailable, SignalImageFsInodesFree, SignalPIDAvailable}
}

// ResourceInodes and ResourcePIDs are the pseudo-resources reclaimed under
// inode and PID pressure.
const (
	ResourceInodes v1.ResourceName = "inodes"
	ResourcePIDs   v1.ResourceName = "pids"
)

// Resource returns the resource a signal is about: memory,
// ephemeral-storage, inodes or pids.
func (s Signal) Resource() v1.ResourceName {
	switch s {
	case SignalMemoryAvailable:
		return v1.ResourceMemory
	case SignalNodeFsAvailable, SignalImageFsAvailable:
		return v1.ResourceEphemeralStorage
	case SignalNodeFsInodesFree, SignalImageFsInodesFree:
		return ResourceInodes
	case SignalPIDAvailable:
		return ResourcePIDs
	}
	return ""
}

// Condition returns the node condition a signal drives.
func (s Signal) Condition() v1.NodeConditionType {
	switch s {
	case SignalMemoryAvailable:
		return v1.NodeMemoryPressure
	case SignalPIDAvailable:
		return v1.NodePIDPressure
	case SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree:
		return v1.NodeDiskPressure
	}
	return ""
}

func (s Signal) valid() bool { return slices.Contains(Signals(), s) }

// Value is a threshold amount: an absolute quantity, or a fraction
// (0 < Percentage <= 1) of the signal's capacity when Quantity is nil.
type Value struct {
	Quantity   *resource.Quantity
	Percentage float64
}

// Amount resolves v against capacity (in the signal's unit).
func (v Value) Amount(capacity int64) int64 {
	if v.Quantity != nil {
		return v.Quantity.Value()
	}
	return int64(float64(capacity) * v.Percentage)
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(v.Percentage*100, 'f', -1, 64) + "%"
}

func (v Value) equal(o Value) bool {
	if (v.Quantity == nil) != (o.Quantity == nil) {
		return false
	}
	if v.Quantity != nil {
		return v.Quantity.Cmp(*o.Quantity) == 0
	}
	return v.Percentage == o.Percentage
}

// Threshold is met when the signal's available amount falls below Value.
// A zero GracePeriod makes it a hard threshold (act at once); a soft one
// must stay met for GracePeriod. MinReclaim, if set, is how far above
// Value the signal must climb before the threshold counts as resolved.
type Threshold struct {
	Signal      Signal
	Value       Value
	GracePeriod time.Duration
	MinReclaim  *Value
}

// Hard reports whether t acts without a grace period.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

func (t Threshold) equal(o Threshold) bool {
	return t.Signal == o.Signal && t.GracePeriod == o.GracePeriod && t.Value.equal(o.Value)
}

func (t Threshold) String() string {
	return fmt.Sprintf("%s<%s (grace %s)", t.Signal, t.Value, t.GracePeriod)
}

// ThresholdConfig is the upstream configuration syntax: the
// KubeletConfiguration fields evictionHard, evictionSoft,
// evictionSoftGracePeriod and evictionMinimumReclaim (or the matching
// --eviction-* flags, split on commas and '=' / '<').
type ThresholdConfig struct {
	Hard            map[string]string
	Soft            map[string]string
	SoftGracePeriod map[string]string
	MinimumReclaim  map[string]string
}

// ParseThresholds turns c into thresholds, hard ones first, each list
// sorted by signal. A value of "0%" or "100%" disables that threshold, as
// upstream. Errors name the field and the signal. Signals other than the
// six supported ones (for example allocatableMemory.available or the
// containerfs signals) are rejected.
func ParseThresholds(c ThresholdConfig) ([]Threshold, error) {
	hard, err := parseStatements("evictionHard", c.Hard)
	if err != nil {
		return nil, err
	}
	soft, err := parseStatements("evictionSoft", c.Soft)
	if err != nil {
		return nil, err
	}
	grace := map[Signal]time.Duration{}
	for _, k := range sortedKeys(c.SoftGracePeriod) {
		s := Signal(k)
		if !s.valid() {
			return nil, fmt.Errorf("evictionSoftGracePeriod: unsupported eviction signal %q", k)
		}
		d, err := time.ParseDuration(c.SoftGracePeriod[k])
		if err != nil {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %w", k, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %q must not be negative", k, c.SoftGracePeriod[k])
		}
		grace[s] = d
	}
	minReclaim := map[Signal]Value{}
	for _, k := range sortedKeys(c.MinimumReclaim) {
		s := Signal(k)
		if !s.valid() {
			return nil, fmt.Errorf("evictionMinimumReclaim: unsupported eviction signal %q", k)
		}
		val := strings.TrimSpace(c.MinimumReclaim[k])
		if strings.HasSuffix(val, "%") {
			p, err := parsePercent(val)
			if err != nil {
				return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %w", k, err)
			}
			if p <= 0 || p > 1 {
				return nil, fmt.Errorf("evictionMinimumReclaim[%s]: percentage %q must be in (0%%, 100%%]", k, val)
			}
			minReclaim[s] = Value{Percentage: p}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %q: %w", k, val, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %q must not be negative", k, val)
		}
		minReclaim[s] = Value{Quantity: &q}
	}
	for i := range soft {
		g, ok := grace[soft[i].Signal]
		if !ok {
			return nil, fmt.Errorf("evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold %s", soft[i].Signal)
		}
		soft[i].GracePeriod = g
	}
	out := append(hard, soft...)
	for i := range out {
		if m, ok := minReclaim[out[i].Signal]; ok {
			out[i].MinReclaim = &m
		}
	}
	return out, nil
}

func parseStatements(field string, m map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, k := range sortedKeys(m) {
		s := Signal(k)
		if !s.valid() {
			return nil, fmt.Errorf("%s: unsupported eviction signal %q", field, k)
		}
		val := strings.TrimSpace(m[k])
		if strings.HasSuffix(val, "%") {
			if val == "0%" || val == "100%" {
				continue
			}
			p, err := parsePercent(val)
			if err != nil {
				return nil, fmt.Errorf("%s[%s]: %w", field, k, err)
			}
			if p < 0 || p > 1 {
				return nil, fmt.Errorf("%s[%s]: percentage %q must be between 0%% and 100%%", field, k, val)
			}
			out = append(out, Threshold{Signal: s, Value: Value{Percentage: p}})
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %q: %w", field, k, val, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%s[%s]: threshold %q must be positive", field, k, val)
		}
		out = append(out, Threshold{Signal: s, Value: Value{Quantity: &q}})
	}
	return out, nil
}

func parsePercent(val string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid percentage %q", val)
	}
	return f / 100, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

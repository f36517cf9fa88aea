package topology

import (
	"slices"
)

// merger picks the best merged hint over every combination of one hint per
// resource, as upstream's topology manager does.
type merger struct {
	all       NUMAMask // every NUMA node of the machine
	distances map[int][]uint64
	// closest breaks ties between equally wide preferred hints by the
	// average NUMA distance (prefer-closest-numa-nodes).
	closest bool
	// bestNonPreferredCount is the widest of the narrowest hints of each
	// resource: a non-preferred merge of that width is as good as it gets.
	bestNonPreferredCount int
}

// flatten turns the providers' hint maps into one hint list per resource:
// a provider or resource without preference contributes {any, preferred},
// a resource that cannot be satisfied {any, not preferred}. Resources are
// taken in name order so the result does not depend on map order.
func flatten(providerHints []map[string][]Hint) [][]Hint {
	var out [][]Hint
	for _, hints := range providerHints {
		if len(hints) == 0 {
			out = append(out, []Hint{{Preferred: true}})
			continue
		}
		names := make([]string, 0, len(hints))
		for name := range hints {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			switch h := hints[name]; {
			case h == nil:
				out = append(out, []Hint{{Preferred: true}})
			case len(h) == 0:
				out = append(out, []Hint{{Preferred: false}})
			default:
				out = append(out, h)
			}
		}
	}
	return out
}

// onlySingleNUMA keeps, per resource, the preferred hints that name no node
// or exactly one (single-numa-node policy).
func onlySingleNUMA(lists [][]Hint) [][]Hint {
	out := make([][]Hint, 0, len(lists))
	for _, list := range lists {
		var keep []Hint
		for _, h := range list {
			if h.Preferred && h.NUMANodes.Count() <= 1 {
				keep = append(keep, h)
			}
		}
		out = append(out, keep)
	}
	return out
}

func newMerger(all NUMAMask, distances map[int][]uint64, closest bool, lists [][]Hint) *merger {
	m := &merger{all: all, distances: distances, closest: closest}
	for _, list := range lists {
		var narrowest NUMAMask
		for _, h := range list {
			if h.NUMANodes != 0 && (narrowest == 0 || h.NUMANodes.NarrowerThan(narrowest)) {
				narrowest = h.NUMANodes
			}
		}
		m.bestNonPreferredCount = max(m.bestNonPreferredCount, narrowest.Count())
	}
	return m
}

// merge walks every combination and returns the best merged hint; with no
// usable combination it is {all nodes, not preferred}.
func (m *merger) merge(lists [][]Hint) Hint {
	var best *Hint
	combo := make([]Hint, len(lists))
	var walk func(i int)
	walk = func(i int) {
		if i == len(lists) {
			h := m.combine(combo)
			best = m.better(best, &h)
			return
		}
		for _, h := range lists[i] {
			combo[i] = h
			walk(i + 1)
		}
	}
	walk(0)
	if best == nil {
		return Hint{NUMANodes: m.all}
	}
	return *best
}

// combine intersects the combination's masks with the machine's nodes. It
// is preferred when every hint is preferred and all that name nodes name
// the same ones.
func (m *merger) combine(combo []Hint) Hint {
	mask, preferred := m.all, true
	var first NUMAMask
	for _, h := range combo {
		if h.NUMANodes != 0 {
			if first == 0 {
				first = h.NUMANodes
			} else if h.NUMANodes != first {
				preferred = false
			}
			mask &= h.NUMANodes
		}
		if !h.Preferred {
			preferred = false
		}
	}
	return Hint{NUMANodes: mask, Preferred: preferred}
}

// better returns whichever of current and candidate the topology manager
// prefers: a non-empty mask, then preferred over not, then (for
// non-preferred) the width closest to bestNonPreferredCount, then the
// narrower (or closer) mask. Ties keep current.
func (m *merger) better(current, candidate *Hint) *Hint {
	if candidate.NUMANodes.Count() == 0 {
		return current
	}
	if current == nil {
		return candidate
	}
	if current.Preferred != candidate.Preferred {
		if candidate.Preferred {
			return candidate
		}
		return current
	}
	if current.Preferred {
		return m.narrower(current, candidate)
	}
	cur, cand, target := current.NUMANodes.Count(), candidate.NUMANodes.Count(), m.bestNonPreferredCount
	switch {
	case cur > target:
		return m.narrower(current, candidate)
	case cur == target:
		if cand != target {
			return current
		}
		return m.narrower(current, candidate)
	case cand > target:
		return current
	case cand == target:
		return candidate
	case cand > cur:
		return candidate
	case cand < cur:
		return current
	}
	return m.narrower(current, candidate)
}

func (m *merger) narrower(current, candidate *Hint) *Hint {
	a, b := current.NUMANodes, candidate.NUMANodes
	if a == b {
		return current
	}
	pick := b
	if m.closest && a.Count() == b.Count() {
		da, db := m.avgDistance(a), m.avgDistance(b)
		switch {
		case da < db, da == db && a < b:
			pick = a
		}
	} else if a.NarrowerThan(b) {
		pick = a
	}
	if pick == a {
		return current
	}
	return candidate
}

func (m *merger) avgDistance(mask NUMAMask) float64 {
	ids := mask.IDs()
	if len(ids) == 0 {
		return 0
	}
	var sum, n float64
	for _, i := range ids {
		for _, j := range ids {
			if d := m.distances[i]; j < len(d) {
				sum += float64(d[j])
			}
			n++
		}
	}
	return sum / n
}

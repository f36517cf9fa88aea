package topology

import (
	"testing"
)

// pref and notPref build hints on the given NUMA nodes (none: any).
func pref(ids ...int) Hint    { return Hint{NUMANodes: mask(ids...), Preferred: true} }
func notPref(ids ...int) Hint { return Hint{NUMANodes: mask(ids...)} }

func mask(ids ...int) NUMAMask {
	m, err := NewNUMAMask(ids...)
	if err != nil {
		panic(err) // test helper: the IDs are constants
	}
	return m
}

type mergeCase struct {
	name      string
	providers []map[string][]Hint
	want      Hint
}

// fourNodes is upstream's four-node test machine (two pairs of close nodes).
func fourNodes() *Machine {
	return &Machine{NUMANodes: []NUMANode{
		{ID: 0, Distances: []uint64{10, 11, 12, 12}},
		{ID: 1, Distances: []uint64{11, 10, 12, 12}},
		{ID: 2, Distances: []uint64{12, 12, 10, 11}},
		{ID: 3, Distances: []uint64{12, 12, 11, 10}},
	}}
}

// eightNodes is upstream's eight-node test machine for the
// prefer-closest-numa-nodes option.
func eightNodes() *Machine {
	d := [][]uint64{
		{10, 11, 12, 12, 30, 30, 30, 30},
		{11, 10, 12, 12, 30, 30, 30, 30},
		{12, 12, 10, 11, 30, 30, 30, 30},
		{12, 12, 11, 10, 30, 30, 30, 30},
		{30, 30, 30, 30, 10, 11, 12, 12},
		{30, 30, 30, 30, 11, 10, 12, 12},
		{30, 30, 30, 30, 12, 12, 10, 11},
		{30, 30, 30, 30, 12, 12, 13, 10},
	}
	m := &Machine{}
	for i := range d {
		m.NUMANodes = append(m.NUMANodes, NUMANode{ID: i, Distances: d[i]})
	}
	return m
}

// commonCases hold for best-effort, restricted and single-numa-node alike:
// the answer is one preferred single node.
func commonCases() []mergeCase {
	return []mergeCase{
		{"same mask, both preferred (0)", []map[string][]Hint{{"r1": {pref(0)}}, {"r2": {pref(0)}}}, pref(0)},
		{"same mask, both preferred (1)", []map[string][]Hint{{"r1": {pref(1)}}, {"r2": {pref(1)}}}, pref(1)},
		{"one provider without hints", []map[string][]Hint{{}, {"r": {pref(0)}}}, pref(0)},
		{"one provider without hints (1)", []map[string][]Hint{{}, {"r": {pref(1)}}}, pref(1)},
		{"two hints against one matching", []map[string][]Hint{{"r1": {pref(0), pref(1)}}, {"r2": {pref(0)}}}, pref(0)},
		{"two hints against one matching (1)", []map[string][]Hint{{"r1": {pref(0), pref(1)}}, {"r2": {pref(1)}}}, pref(1)},
		{"narrower preferred hint from both", []map[string][]Hint{
			{"r1": {pref(0), pref(1)}}, {"r2": {pref(0), notPref(0, 1)}},
		}, pref(0)},
		{"wider preferred beats narrower non-preferred", []map[string][]Hint{
			{"r1": {pref(1), notPref(0, 1)}}, {"r2": {pref(0), pref(1), notPref(0, 1)}},
		}, pref(1)},
		{"multiple resources, same provider", []map[string][]Hint{
			{"r1": {pref(1), notPref(0, 1)}, "r2": {pref(0), pref(1), notPref(0, 1)}},
		}, pref(1)},
		{"no-preference provider", []map[string][]Hint{
			{"r1": {pref(0), pref(1), notPref(0, 1)}}, nil,
		}, pref(0)},
	}
}

// bestEffortCases are upstream's expectations for best-effort and
// restricted on four nodes.
func bestEffortCases() []mergeCase {
	all := []int{0, 1, 2, 3}
	return []mergeCase{
		{"no providers", nil, pref(all...)},
		{"empty hint map", []map[string][]Hint{{}}, pref(all...)},
		{"nil hints for a resource", []map[string][]Hint{{"r": nil}}, pref(all...)},
		{"empty hints for a resource", []map[string][]Hint{{"r": {}}}, notPref(all...)},
		{"single any-node preferred hint", []map[string][]Hint{{"r": {pref()}}}, pref(all...)},
		{"single any-node non-preferred hint", []map[string][]Hint{{"r": {notPref()}}}, notPref(all...)},
		{"no common mask", []map[string][]Hint{{"r1": {pref(0)}}, {"r2": {pref(1)}}}, notPref(all...)},
		{"same mask, one not preferred", []map[string][]Hint{{"r1": {pref(0)}}, {"r2": {notPref(0)}}}, notPref(0)},
		{"same mask, one not preferred (1)", []map[string][]Hint{{"r1": {pref(1)}}, {"r2": {notPref(1)}}}, notPref(1)},
		{"wider mask, both preferred", []map[string][]Hint{{"r1": {pref(0)}}, {"r2": {pref(0, 1)}}}, notPref(0)},
		{"wider mask, both preferred (1)", []map[string][]Hint{{"r1": {pref(1)}}, {"r2": {pref(0, 1)}}}, notPref(1)},
		{"two hints against one non-preferred", []map[string][]Hint{{"r1": {pref(0), pref(1)}}, {"r2": {notPref(0, 1)}}}, notPref(0)},
		{"same masks with different bits", []map[string][]Hint{
			{"r1": {pref(0, 1), pref(0, 2)}}, {"r2": {pref(0, 1), pref(0, 2)}},
		}, pref(0, 1)},
		{"bestNonPreferredAffinityCount 1", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(0, 1)}},
		}, notPref(0, 1)},
		{"bestNonPreferredAffinityCount 2", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(0, 3)}},
		}, notPref(0, 3)},
		{"bestNonPreferredAffinityCount 3", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(1, 2)}},
		}, notPref(1, 2)},
		{"bestNonPreferredAffinityCount 4", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(2, 3)}},
		}, notPref(2, 3)},
	}
}

func TestMergeBestEffortAndRestricted(t *testing.T) {
	cases := append(commonCases(), bestEffortCases()...)
	cases = append(cases,
		mergeCase{"bestNonPreferredAffinityCount 5", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(1, 2), notPref(2, 3)}},
		}, notPref(1, 2)},
		mergeCase{"bestNonPreferredAffinityCount 6", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(1, 2, 3), notPref(1, 2), notPref(1, 3), notPref(2, 3)}},
		}, notPref(1, 2)},
	)
	for _, policy := range []string{PolicyBestEffort, PolicyRestricted} {
		m, err := NewManager(Config{Policy: policy, Machine: fourNodes()})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			got, admit := m.Merge(tc.providers)
			if got != tc.want {
				t.Errorf("%s: %s: merged %v, want %v", policy, tc.name, got, tc.want)
			}
			if wantAdmit := policy == PolicyBestEffort || tc.want.Preferred; admit != wantAdmit {
				t.Errorf("%s: %s: admit %t, want %t", policy, tc.name, admit, wantAdmit)
			}
		}
	}
}

func TestMergeClosestNUMA(t *testing.T) {
	cases := append(commonCases(), bestEffortCases()[7:]...) // the node-naming ones hold on eight nodes too
	cases = append(cases,
		mergeCase{"closest pair among equal widths", []map[string][]Hint{
			{"r1": {pref(0, 4), pref(0, 2)}}, {"r2": {pref(0, 4), pref(0, 2)}},
		}, pref(0, 2)},
		mergeCase{"narrower still wins", []map[string][]Hint{
			{"r1": {pref(4), pref(0, 2)}}, {"r2": {pref(4), pref(0, 2)}},
		}, pref(4)},
		mergeCase{"bestNonPreferredAffinityCount 5 by distance", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(1, 2), notPref(2, 3)}},
		}, notPref(2, 3)},
		mergeCase{"bestNonPreferredAffinityCount 6 by distance", []map[string][]Hint{
			{"r1": {notPref(0, 1, 2, 3), notPref(0, 1)}}, {"r2": {notPref(1, 2, 3), notPref(1, 2), notPref(1, 3), notPref(2, 3)}},
		}, notPref(2, 3)},
	)
	m, err := NewManager(Config{Policy: PolicyBestEffort, Machine: eightNodes(), Options: map[string]string{OptionPreferClosestNUMANodes: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if got, _ := m.Merge(tc.providers); got != tc.want {
			t.Errorf("%s: merged %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMergeSingleNUMANode(t *testing.T) {
	cases := append(commonCases(),
		mergeCase{"no providers", nil, pref()},
		mergeCase{"empty hint map", []map[string][]Hint{{}}, pref()},
		mergeCase{"nil hints for a resource", []map[string][]Hint{{"r": nil}}, pref()},
		mergeCase{"empty hints for a resource", []map[string][]Hint{{"r": {}}}, notPref()},
		mergeCase{"single any-node preferred hint", []map[string][]Hint{{"r": {pref()}}}, pref()},
		mergeCase{"single any-node non-preferred hint", []map[string][]Hint{{"r": {notPref()}}}, notPref()},
		mergeCase{"no common mask", []map[string][]Hint{{"r1": {pref(0)}}, {"r2": {pref(1)}}}, notPref()},
		mergeCase{"same mask, one not preferred", []map[string][]Hint{{"r1": {pref(0)}}, {"r2": {notPref(0)}}}, notPref()},
		mergeCase{"only a two-node hint matches", []map[string][]Hint{{"r1": {pref(0), pref(1)}}, {"r2": {notPref(0, 1)}}}, notPref()},
		mergeCase{"a resource that needs two nodes", []map[string][]Hint{
			{"r1": {pref(0, 1)}, "r2": {pref(0), pref(1), notPref(0, 1)}},
		}, notPref()},
	)
	m, err := NewManager(Config{Policy: PolicySingleNUMANode, Machine: fourNodes()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		got, admit := m.Merge(tc.providers)
		if got != tc.want || admit != tc.want.Preferred {
			t.Errorf("%s: merged %v (admit %t), want %v", tc.name, got, admit, tc.want)
		}
	}
}

func TestNUMAMask(t *testing.T) {
	m := mask(3, 0, 5)
	if m.Count() != 3 || !m.Has(5) || m.Has(1) || m.String() != "0,3,5" {
		t.Fatalf("mask %v: count %d", m, m.Count())
	}
	if !mask(7).NarrowerThan(mask(0, 1)) || !mask(0, 1).NarrowerThan(mask(0, 2)) || mask(0, 2).NarrowerThan(mask(0, 1)) {
		t.Fatal("NarrowerThan does not order by width, then by node IDs")
	}
	if _, err := NewNUMAMask(64); err == nil {
		t.Fatal("NUMA node 64 accepted")
	}
}

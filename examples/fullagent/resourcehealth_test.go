package main

import (
	"testing"

	"github.com/nodekit/nodekit/devicemgr"
	"github.com/nodekit/nodekit/dra"
	"github.com/nodekit/nodekit/kubeletconfig"
)

// TestResourceHealthGates: with ResourceHealthStatus on (the default) the
// loop gets the device plugins' then DRA's health, messages with
// ResourceHealthStatusMessage; off, none; either gate off is accepted.
func TestResourceHealthGates(t *testing.T) {
	dm, err := devicemgr.New(t.Context(), devicemgr.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := dra.New(dra.Config{RootDir: t.TempDir(), Claims: dra.ClaimGetterFunc(nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gates            map[string]bool
		report, messages bool
		providers        int
	}{
		{nil, true, true, 2},
		{map[string]bool{featureResourceHealthStatusMessage: false}, true, false, 2},
		{map[string]bool{featureResourceHealthStatus: false, featureResourceHealthStatusMessage: false}, false, false, 0},
	} {
		if err := checkGates(tc.gates); err != nil {
			t.Errorf("gates %v refused: %v", tc.gates, err)
		}
		gates, err := kubeletconfig.NewGates(t.Context(), tc.gates)
		if err != nil {
			t.Fatal(err)
		}
		report, messages := healthGates(gates)
		got := resourceHealth(gates, dm, m)
		if report != tc.report || messages != tc.messages || len(got) != tc.providers {
			t.Errorf("gates %v: report %v messages %v, %d providers; want %v %v %d", tc.gates, report, messages, len(got), tc.report, tc.messages, tc.providers)
		}
		if tc.providers == 2 && (got[0] != any(dm) || got[1] != any(m)) {
			t.Errorf("providers %v, want the device manager then DRA", got)
		}
	}
	gates, _ := kubeletconfig.NewGates(t.Context(), nil)
	if got := resourceHealth(gates, nil, nil); len(got) != 0 {
		t.Errorf("no managers: %d providers, want none", len(got))
	}
}

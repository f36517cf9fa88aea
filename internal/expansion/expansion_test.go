package expansion

import "testing"

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1", "B": "two"}
	cases := map[string]string{
		"$(A)-$(B)":   "1-two",
		"$$(A)":       "$(A)",
		"$(MISSING)":  "$(MISSING)",
		"$(A":         "$(A",
		"cost: $5":    "cost: $5",
		"trailing $":  "trailing $",
		"$()":         "$()",
		"x$(A)y$(A)z": "x1y1z",
	}
	for in, want := range cases {
		if got := Expand(in, env); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

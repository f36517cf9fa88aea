package kubeclient

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestOneRateLimiterForEveryGroup checks every group's requests wait on
// one bucket of the config's QPS and burst, as the clientset's do: an
// agent's kubeAPIQPS is its budget, not one per group.
func TestOneRateLimiterForEveryGroup(t *testing.T) {
	c, err := New(&rest.Config{Host: "https://127.0.0.1:1", QPS: 7, Burst: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := c.core.GetRateLimiter()
	if l == nil || l.QPS() != 7 {
		t.Fatalf("core limiter %v, want one of 7 QPS", l)
	}
	for name, rc := range map[string]*rest.RESTClient{"coordination": c.coordination, "storage": c.storage,
		"resource": c.resource, "node": c.node, "certificates": c.certificates,
		"authentication": c.authentication, "authorization": c.authorization} {
		if rc.GetRateLimiter() != l {
			t.Errorf("%s has a limiter of its own", name)
		}
	}

	given := flowcontrol.NewTokenBucketRateLimiter(3, 4)
	c, err = New(&rest.Config{Host: "https://127.0.0.1:1", QPS: 7, Burst: 9, RateLimiter: given}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.core.GetRateLimiter() != given || c.storage.GetRateLimiter() != given {
		t.Error("a config's own RateLimiter is not the one used")
	}
}

func TestNewRefusesQPSWithoutBurst(t *testing.T) {
	_, err := New(&rest.Config{Host: "https://127.0.0.1:1", QPS: 5}, nil)
	if err == nil || !strings.Contains(err.Error(), "burst 0") {
		t.Errorf("New with QPS 5 and no burst: %v, want an error naming the burst", err)
	}
}

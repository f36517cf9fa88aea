package main

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// The ideal agent with kubelet's requests asks for the pod's bound token
// before its status write, and writes the container's three events after
// it through the events' client; the plain ideal agent makes the status
// write alone.
func TestIdealKubeletRequests(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
	}
	for _, withRequests := range []bool{false, true} {
		client := fake.NewClientset(pod.DeepCopy())
		var token *authnv1.TokenRequest
		client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "token" {
				return false, nil, nil
			}
			token = a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenRequest)
			return true, token, nil
		})
		// The events go to a client of their own, as kubelet's.
		eventClient := fake.NewClientset()
		ctx, cancel := context.WithCancel(context.Background())
		var r *kubeletRequests
		if withRequests {
			r = newKubeletRequests(client, eventClient, "n1")
			go r.writeEvents(ctx)
		}
		if err := r.settle(ctx, client, pod, "192.0.2.2", "10.244.0.2"); err != nil {
			t.Fatalf("kubelet requests %v: settle: %v", withRequests, err)
		}
		var events *v1.EventList
		deadline := time.Now().Add(10 * time.Second)
		for {
			var err error
			if events, err = eventClient.CoreV1().Events("default").List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
			if !withRequests || len(events.Items) == 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()

		var verbs []string
		for _, a := range client.Actions() {
			if a.GetVerb() == "list" {
				continue
			}
			verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
		if !withRequests {
			if len(verbs) != 1 || verbs[0] != "patch pods/status" || token != nil {
				t.Errorf("plain ideal agent made %v, want the status patch alone", verbs)
			}
			continue
		}
		if len(verbs) != 2 || verbs[0] != "create serviceaccounts/token" || verbs[1] != "patch pods/status" {
			t.Fatalf("requests %v, want the token request, then the status patch (the events on their own client)", verbs)
		}
		ref := token.Spec.BoundObjectRef
		if ref == nil || ref.Kind != "Pod" || ref.Name != "p" || ref.UID != "uid-1" || *token.Spec.ExpirationSeconds != tokenSeconds {
			t.Errorf("token request %+v, want bound to pod p (uid-1) for %d s", token.Spec, tokenSeconds)
		}
		reasons := map[string]bool{}
		for _, e := range events.Items {
			if e.InvolvedObject.UID != "uid-1" || e.Source.Host != "n1" || e.Type != v1.EventTypeNormal {
				t.Errorf("event %+v is not a Normal event of n1 about the pod", e)
			}
			reasons[e.Reason] = true
		}
		if len(events.Items) != 3 || !reasons["Pulled"] || !reasons["Created"] || !reasons["Started"] {
			t.Errorf("%d events with reasons %v, want Pulled, Created and Started", len(events.Items), reasons)
		}
	}
}

// ideal-limited's clients get the agents' limits, the events a client of
// their own; the other ideal agents share one client that never waits.
func TestIdealClientConfigs(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:6443"}
	client, events, err := idealClientConfigs(rc, idealConfig{})
	if err != nil || client != events || client.QPS != idealQPS || client.Burst != idealQPS {
		t.Errorf("no limits: client %+v, events %+v (same: %v), %v; want one client of QPS and burst %d",
			client, events, client == events, err, idealQPS)
	}
	var o options
	if err := o.validateAPILimits(); err != nil {
		t.Fatal(err)
	}
	c := idealConfig{}
	fs := flag.NewFlagSet(idealCommand, flag.ContinueOnError)
	c.flags(fs)
	// startAgent gives ideal-limited --kubelet-requests and idealLimits.
	if err := fs.Parse(append([]string{"--kubelet-requests"}, o.idealLimits()...)); err != nil {
		t.Fatalf("idealLimits %v: %v", o.idealLimits(), err)
	}
	client, events, err = idealClientConfigs(rc, c)
	if err != nil {
		t.Fatal(err)
	}
	if client == events || client.QPS != upstreamAPIQPS || client.Burst != upstreamAPIBurst ||
		events.QPS != upstreamEventQPS || events.Burst != upstreamEventBurst || rc.QPS != 0 {
		t.Errorf("upstream's limits: client %g/%d, events %g/%d (same: %v), given config's QPS %g; want %d/%d and %d/%d apart, the given config untouched",
			client.QPS, client.Burst, events.QPS, events.Burst, client == events, rc.QPS,
			upstreamAPIQPS, upstreamAPIBurst, upstreamEventQPS, upstreamEventBurst)
	}
	o = options{apiQPS: 20}
	if err := o.validateAPILimits(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(o.idealLimits(), " "), "--qps=20 --burst=40 --event-qps=50 --event-burst=100"; got != want {
		t.Errorf("--kube-api-qps=20: ideal-limited's flags %q, want %q", got, want)
	}
	for _, bad := range []idealConfig{{qps: 10}, {eventQPS: 10, kubeletRequests: true}, {qps: -1, burst: 1}, {burst: 5},
		{eventQPS: 10, eventBurst: 20}} {
		if _, _, err := idealClientConfigs(rc, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

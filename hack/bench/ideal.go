package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// idealCommand, as the first argument, makes the bench binary the ideal
// agent (the bench starts itself so, as a child like the other agents).
const idealCommand = "ideal-agent"

// The ideal agent's limits: how many status patches are in flight at
// once, and its client's rate limit (high enough never to wait).
const (
	idealWorkers = 8
	idealQPS     = 1000
	leaseRenew   = 10 * time.Second
	leaseSeconds = 40
)

// idealConfig is the ideal agent's command line.
type idealConfig struct {
	kubeconfig, nodeName, nodeIP string
	maxPods                      int
	// kubeletRequests adds, for each pod, the requests kubelet makes for
	// it on the bench's workload (see kubeletRequests).
	kubeletRequests bool
	// qps and burst, when qps is above 0, limit the client of every
	// request but the events, as kubeAPIQPS and kubeAPIBurst limit
	// kubelet's; eventQPS and eventBurst, when eventQPS is above 0, give
	// the events a client of their own so limited, as eventRecordQPS and
	// eventBurst. Otherwise one client with idealQPS serves all.
	qps, burst, eventQPS, eventBurst int
}

// idealMain runs the ideal agent until SIGTERM: the floor the API server
// allows a node agent. It registers its Node Ready, renews its Lease every
// 10 s, watches the pods bound to it and patches each one Running (all
// containers running and ready, a pod IP of 10.244.0.0/16) as soon as the
// watch shows it, idealWorkers patches at a time; a pod being deleted is
// deleted at once. It runs nothing and never looks at a pod again.
func idealMain(args []string) int {
	var c idealConfig
	fs := flag.NewFlagSet(idealCommand, flag.ContinueOnError)
	c.flags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runIdeal(ctx, c); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "ideal agent:", err)
		return 1
	}
	return 0
}

// flags defines the ideal agent's command line into c.
func (c *idealConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "the node's kubeconfig")
	fs.StringVar(&c.nodeName, "node-name", nodeName, "the node's name")
	fs.StringVar(&c.nodeIP, "node-ip", "", "the node's IP address")
	fs.IntVar(&c.maxPods, "max-pods", 110, "the node's pod capacity")
	fs.BoolVar(&c.kubeletRequests, "kubelet-requests", false, "make kubelet's requests for each pod: a token request before the status write, three events after it")
	fs.IntVar(&c.qps, "qps", 0, "the client's QPS, as kubeAPIQPS (0: no limit)")
	fs.IntVar(&c.burst, "burst", 0, "with --qps: the client's burst, as kubeAPIBurst")
	fs.IntVar(&c.eventQPS, "event-qps", 0, "with --kubelet-requests: the events' own client's QPS, as eventRecordQPS (0: the events share the client)")
	fs.IntVar(&c.eventBurst, "event-burst", 0, "with --event-qps: the events' client's burst, as eventBurst")
}

// idealClientConfigs is the configuration of the ideal agent's client and
// of its events' client (the same one unless c.eventQPS is set), each with
// c's limits or, without them, idealQPS.
func idealClientConfigs(rc *rest.Config, c idealConfig) (client, events *rest.Config, err error) {
	if c.qps < 0 || c.burst < 0 || c.eventQPS < 0 || c.eventBurst < 0 {
		return nil, nil, fmt.Errorf("negative client limit: qps %d, burst %d, event qps %d, event burst %d", c.qps, c.burst, c.eventQPS, c.eventBurst)
	}
	if (c.qps > 0) != (c.burst > 0) || (c.eventQPS > 0) != (c.eventBurst > 0) {
		return nil, nil, fmt.Errorf("a QPS needs its burst: qps %d, burst %d, event qps %d, event burst %d", c.qps, c.burst, c.eventQPS, c.eventBurst)
	}
	if c.eventQPS > 0 && !c.kubeletRequests {
		return nil, nil, fmt.Errorf("event qps %d needs --kubelet-requests: without it the ideal agent writes no events", c.eventQPS)
	}
	client = rest.CopyConfig(rc)
	client.QPS, client.Burst = idealQPS, idealQPS
	if c.qps > 0 {
		client.QPS, client.Burst = float32(c.qps), c.burst
	}
	if c.eventQPS == 0 {
		return client, client, nil
	}
	events = rest.CopyConfig(rc)
	events.QPS, events.Burst = float32(c.eventQPS), c.eventBurst
	return client, events, nil
}

func runIdeal(ctx context.Context, c idealConfig) error {
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	mainCfg, eventsCfg, err := idealClientConfigs(rc, c)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(mainCfg)
	if err != nil {
		return err
	}
	eventClient := client
	if eventsCfg != mainCfg {
		if eventClient, err = kubernetes.NewForConfig(eventsCfg); err != nil {
			return err
		}
	}
	node, err := registerNode(ctx, client, c)
	if err != nil {
		return err
	}
	go renewLease(ctx, client, node)
	work := make(chan *v1.Pod, 1024)
	ips := &ipPool{next: netip.MustParseAddr("10.244.0.1")}
	var reqs *kubeletRequests
	if c.kubeletRequests {
		reqs = newKubeletRequests(client, eventClient, c.nodeName)
		go reqs.writeEvents(ctx)
	}
	for range idealWorkers {
		go func() {
			for p := range work {
				if err := reqs.settle(ctx, client, p, c.nodeIP, ips.take()); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "ideal agent: pod %s/%s: %v\n", p.Namespace, p.Name, err)
				}
			}
		}()
	}
	defer close(work)
	return watchPods(ctx, client, c.nodeName, work)
}

// registerNode creates the Node and sets its status Ready.
func registerNode(ctx context.Context, client kubernetes.Interface, c idealConfig) (*v1.Node, error) {
	capacity := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory: resource.MustParse("16Gi"),
		v1.ResourcePods:   *resource.NewQuantity(int64(c.maxPods), resource.DecimalSI),
	}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodeName, Labels: map[string]string{
		"kubernetes.io/hostname": c.nodeName, "kubernetes.io/os": goruntime.GOOS, "kubernetes.io/arch": goruntime.GOARCH,
	}}}
	created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = client.CoreV1().Nodes().Get(ctx, c.nodeName, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("register node: %w", err)
	}
	now := metav1.Now()
	cond := func(t v1.NodeConditionType, s v1.ConditionStatus, reason string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	created.Status = v1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady"),
		},
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: c.nodeIP}, {Type: v1.NodeHostName, Address: c.nodeName}},
		NodeInfo:  v1.NodeSystemInfo{KubeletVersion: "ideal", OperatingSystem: goruntime.GOOS, Architecture: goruntime.GOARCH},
	}
	updated, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("node status: %w", err)
	}
	return updated, nil
}

// renewLease keeps the node's Lease fresh, as kubelet's heartbeat does.
func renewLease(ctx context.Context, client kubernetes.Interface, node *v1.Node) {
	leases := client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	holder, seconds := node.Name, int32(leaseSeconds)
	var lease *coordv1.Lease
	for {
		now := metav1.NewMicroTime(time.Now())
		var err error
		if lease == nil {
			lease, err = leases.Create(ctx, &coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
				Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &now},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				lease, err = leases.Get(ctx, node.Name, metav1.GetOptions{})
			}
		} else {
			lease.Spec.RenewTime = &now
			lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		}
		if err != nil {
			lease = nil
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "ideal agent: lease:", err)
			}
		}
		if sleep(ctx, leaseRenew) != nil {
			return
		}
	}
}

// watchPods lists and watches the node's pods and hands each one that is
// not Running yet, or is being deleted, to the workers, once.
func watchPods(ctx context.Context, client kubernetes.Interface, node string, work chan<- *v1.Pod) error {
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	handed := map[types.UID]string{} // UID → "run" or "delete"
	hand := func(p *v1.Pod) {
		what := "run"
		if p.DeletionTimestamp != nil {
			what = "delete"
		} else if p.Status.Phase != v1.PodPending && p.Status.Phase != "" {
			return
		}
		if handed[p.UID] == what {
			return
		}
		handed[p.UID] = what
		select {
		case work <- p:
		case <-ctx.Done():
		}
	}
	for ctx.Err() == nil {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return err
		}
		for i := range list.Items {
			hand(&list.Items[i])
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*v1.Pod); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				hand(p)
			}
		}
		w.Stop()
	}
	return ctx.Err()
}

// settle deletes a pod that is being deleted, and patches any other
// Running.
func settle(ctx context.Context, client kubernetes.Interface, p *v1.Pod, hostIP, podIP string) error {
	pods := client.CoreV1().Pods(p.Namespace)
	if p.DeletionTimestamp != nil {
		err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	body, err := json.Marshal(map[string]v1.PodStatus{"status": runningStatus(p, hostIP, podIP, metav1.Now())})
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// runningStatus is a pod's status with every container running and
// ready since now.
func runningStatus(p *v1.Pod, hostIP, podIP string, now metav1.Time) v1.PodStatus {
	st := v1.PodStatus{
		Phase: v1.PodRunning, HostIP: hostIP, HostIPs: []v1.HostIP{{IP: hostIP}},
		PodIP: podIP, PodIPs: []v1.PodIP{{IP: podIP}}, StartTime: &now,
	}
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled} {
		st.Conditions = append(st.Conditions, v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: now})
	}
	started := true
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: &started,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// ipPool hands out pod IPs in order; safe for concurrent use.
type ipPool struct {
	mu   sync.Mutex
	next netip.Addr
}

func (p *ipPool) take() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ip := p.next
	p.next = ip.Next()
	return ip.String()
}

// Command customadmit shows a custom admission policy, teamQuota, in the
// chain a node agent runs. It reads pod manifests and admits their pods, in
// order, onto a node of the given size through admission.Builtins followed
// by teamQuota: the decisions an agent's sync loop would make, without
// running anything. Each admitted pod counts against the later ones.
//
//	go run ./examples/customadmit -cpu 2 -memory 4Gi -quota payments=1 pods/*.yaml
//	default/checkout: admitted
//	default/refunds: rejected TeamQuotaExceeded: team "payments" already runs 1 of its 1 pods on this node
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/admission"
	"github.com/nodekit/nodekit/podconfig"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "customadmit:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("customadmit", flag.ContinueOnError)
	cpu := fs.String("cpu", "4", "the node's allocatable CPU")
	memory := fs.String("memory", "8Gi", "the node's allocatable memory")
	maxPods := fs.Int("max-pods", 110, "the most pods the node runs")
	quotas := fs.String("quota", "", "comma-separated team=pods quotas")
	policy := teamQuota{Quotas: map[string]int{}}
	fs.IntVar(&policy.Default, "default-quota", 3, "the quota of a team not in -quota")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for pair := range strings.SplitSeq(*quotas, ",") {
		if pair == "" {
			continue
		}
		team, n, ok := strings.Cut(pair, "=")
		quota, err := strconv.Atoi(n)
		if !ok || team == "" || err != nil || quota < 0 {
			return fmt.Errorf("-quota: %q is not team=pods", pair)
		}
		policy.Quotas[team] = quota
	}
	node, err := nodeObject(*cpu, *memory, *maxPods)
	if err != nil {
		return err
	}

	// The agent's chain: the built-ins, then the custom policy.
	chain := admission.NewChain(admission.Builtins(admission.NodeFunc(func(context.Context) (*v1.Node, error) {
		return node, nil
	}))...)
	chain.Add(policy)

	var admitted []*v1.Pod
	for _, path := range fs.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pods, err := podconfig.DecodeManifest(data, path)
		if err != nil {
			return err
		}
		for _, pod := range pods {
			if pod.Namespace == "" {
				pod.Namespace = metav1.NamespaceDefault
			}
			d := chain.Admit(ctx, nodekit.AdmitRequest{Pod: pod, Pods: admitted})
			if d.Admit {
				admitted = append(admitted, pod)
				fmt.Fprintf(out, "%s/%s: admitted\n", pod.Namespace, pod.Name)
				continue
			}
			fmt.Fprintf(out, "%s/%s: rejected %s: %s\n", pod.Namespace, pod.Name, d.Reason, d.Message)
		}
	}
	return nil
}

// nodeObject is a Linux node with the given allocatable resources.
func nodeObject(cpu, memory string, maxPods int) (*v1.Node, error) {
	c, err := resource.ParseQuantity(cpu)
	if err != nil {
		return nil, fmt.Errorf("-cpu: %w", err)
	}
	m, err := resource.ParseQuantity(memory)
	if err != nil {
		return nil, fmt.Errorf("-memory: %w", err)
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node", Labels: map[string]string{v1.LabelHostname: "node", v1.LabelOSStable: "linux"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: c, v1.ResourceMemory: m, v1.ResourcePods: *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
		}},
	}, nil
}

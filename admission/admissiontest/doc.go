// Package admissiontest runs pods through nodekit's admission chain against a
// node described in a few lines, for table tests of custom admitters and
// policies. It is deterministic and needs no agent, runtime or API server.
//
// Node turns a few fields (allocatable, labels, taints, admitted pods) into a
// node object and runs admission.Builtins plus the admitters a test passes;
// Resources and Pod build the usual test literals. It holds no fakes of other
// subsystems: eviction or resource-manager admitters are passed in like any
// custom one.
//
//	n := admissiontest.Node{
//		Allocatable: admissiontest.Resources("cpu=2,memory=4Gi"),
//		Labels:      map[string]string{"zone": "a"},
//		Pods:        []*v1.Pod{admissiontest.Pod("db", admissiontest.Resources("cpu=1500m"))},
//	}
//	d := n.Admit(ctx, admissiontest.Pod("web", admissiontest.Resources("cpu=1")), myPolicy)
//	// d.Reason == "OutOfcpu"
package admissiontest

package podconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzDecodeManifest checks that any input either decodes into valid,
// defaulted pods that survive a round trip and the static-pod step, or fails
// with a *ManifestError — never a panic.
func FuzzDecodeManifest(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "manifests", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{"", "{}", "null", "[]", "---\n---\n", "kind: Pod\napiVersion: v1\n", "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"items\":[{}]}"} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := DecodeManifest(data, "fuzz.yaml")
		if err != nil {
			var me *ManifestError
			if !errors.As(err, &me) || len(me.Fields) == 0 {
				t.Fatalf("error %T %v is not a *ManifestError with fields", err, err)
			}
			return
		}
		if len(pods) == 0 {
			return // an empty PodList
		}
		for _, pod := range pods {
			if pod == nil || pod.Name == "" || len(pod.Spec.Containers) == 0 || pod.Spec.RestartPolicy == "" || pod.Spec.TerminationGracePeriodSeconds == nil {
				t.Fatalf("decoded pod is not valid and defaulted: %+v", pod)
			}
			// Defaults are idempotent: the decoded pod decodes to itself.
			enc, err := json.Marshal(pod)
			if err != nil {
				t.Fatalf("encode decoded pod: %v", err)
			}
			again, err := DecodeManifest(enc, "round-trip")
			if err != nil {
				t.Fatalf("decoded pod does not decode again: %v\n%s", err, enc)
			}
			if len(again) != 1 || !equality.Semantic.DeepEqual(again[0], pod) {
				t.Fatalf("round trip changed the pod:\n%s", enc)
			}
			if err := makeStatic(pod, staticPodOptions{nodeName: "node", source: "file", location: "fuzz.yaml", tolerateNoExecute: true}); err != nil {
				var me *ManifestError
				if !errors.As(err, &me) {
					t.Fatalf("makeStatic error %T %v is not a *ManifestError", err, err)
				}
			}
		}
	})
}

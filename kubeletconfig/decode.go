package kubeletconfig

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The only apiVersion and kind accepted, in files and drop-ins alike.
const (
	APIVersion = "kubelet.config.k8s.io/v1beta1"
	Kind       = "KubeletConfiguration"
	// DropInSuffix is the suffix of the files --config-dir reads; others
	// are skipped, as upstream.
	DropInSuffix = ".conf"
)

// Decode parses one KubeletConfiguration document (YAML or JSON) strictly:
// keys are case-sensitive, and an unknown field, a duplicate key, a value
// of the wrong type or an apiVersion/kind other than
// kubelet.config.k8s.io/v1beta1 KubeletConfiguration is an error naming
// the field path (e.g. authentication.x509.clientCAFile). No defaults are
// applied. The returned value is the caller's.
func Decode(data []byte) (*kubeletv1beta1.KubeletConfiguration, error) {
	js, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	if err := decodeJSON(js, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// toJSON converts a YAML or JSON document to JSON, refusing duplicate keys
// and documents without the right apiVersion and kind.
func toJSON(data []byte) ([]byte, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("the file is empty")
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("not a YAML or JSON document: %w", err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("apiVersion/kind: %w", err)
	}
	if tm.APIVersion != APIVersion || tm.Kind != Kind {
		return nil, fmt.Errorf("apiVersion/kind: %q/%q, want %s %s", tm.APIVersion, tm.Kind, APIVersion, Kind)
	}
	return js, nil
}

// decodeJSON unmarshals case-sensitively and fails on unknown fields,
// duplicate fields and wrong types, each error naming the field.
func decodeJSON(js []byte, cfg *kubeletv1beta1.KubeletConfiguration) error {
	strict, err := sigsjson.UnmarshalStrict(js, cfg, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return typeError(err)
	}
	if len(strict) > 0 {
		return errors.Join(strict...)
	}
	return nil
}

// typeError rewrites encoding/json's type errors to start with the field
// path ("maxPods: ...").
func typeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: cannot use a JSON %s as %s: %w", te.Field, te.Value, te.Type, err)
	}
	return err
}

// Load reads the configuration as kubelet v1.37 does: the file (none when
// empty) with its relative paths resolved against the file's directory,
// upstream's defaults, then every *.conf file under dropInDir (none when
// empty; subdirectories included, in lexical order of their paths) merged
// over it as a JSON merge patch, then the defaults again. Each file is
// decoded strictly (see Decode) and errors name the file and the field.
// Load does not validate: apply command-line flags, then call Validate.
// It blocks on file reads only; the caller owns the result.
func Load(ctx context.Context, file, dropInDir string) (*kubeletv1beta1.KubeletConfiguration, error) {
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if cfg, err = Decode(data); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		abs, err := filepath.Abs(file)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		resolvePaths(cfg, filepath.Dir(abs))
	}
	if err := SetDefaults(cfg); err != nil {
		return nil, prefix(file, err)
	}
	if dropInDir == "" {
		return cfg, nil
	}
	merged, err := mergeDropIns(ctx, cfg, dropInDir)
	if err != nil {
		return nil, err
	}
	if err := SetDefaults(merged); err != nil {
		return nil, fmt.Errorf("--config-dir %s: %w", dropInDir, err)
	}
	return merged, nil
}

func prefix(file string, err error) error {
	if file == "" {
		return err
	}
	return fmt.Errorf("%s: %w", file, err)
}

// resolvePaths makes the file paths of the configuration absolute against
// dir, the same fields upstream resolves.
func resolvePaths(cfg *kubeletv1beta1.KubeletConfiguration, dir string) {
	paths := []*string{&cfg.StaticPodPath, &cfg.Authentication.X509.ClientCAFile, &cfg.TLSCertFile,
		&cfg.TLSPrivateKeyFile, &cfg.VolumePluginDir, &cfg.PodLogsDir}
	if cfg.ResolverConfig != nil {
		paths = append(paths, cfg.ResolverConfig)
	}
	for _, p := range paths {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// mergeDropIns applies the drop-in files of dir over base in lexical order.
func mergeDropIns(ctx context.Context, base *kubeletv1beta1.KubeletConfiguration, dir string) (*kubeletv1beta1.KubeletConfiguration, error) {
	logger := klog.FromContext(ctx)
	js, err := json.Marshal(base)
	if err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	doc, err := jsonValue(js)
	if err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	// WalkDir visits entries in lexical order, directories depth first.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if filepath.Ext(d.Name()) != DropInSuffix {
			logger.V(4).Info("Skipped file in the drop-in directory (no .conf suffix)", "file", path)
			return nil
		}
		patch, err := loadDropIn(path)
		if err != nil {
			return fmt.Errorf("drop-in %s: %w", path, err)
		}
		doc = mergePatch(doc, patch)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("--config-dir %s: %w", dir, err)
	}
	if js, err = json.Marshal(doc); err != nil {
		return nil, fmt.Errorf("--config-dir: %w", err)
	}
	out := &kubeletv1beta1.KubeletConfiguration{}
	if err := decodeJSON(js, out); err != nil {
		return nil, fmt.Errorf("--config-dir %s: merged configuration: %w", dir, err)
	}
	return out, nil
}

// loadDropIn decodes a drop-in strictly (to find its errors) and returns
// its fields as a JSON merge patch.
func loadDropIn(path string) (any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js, err := toJSON(data)
	if err != nil {
		return nil, err
	}
	if err := decodeJSON(js, &kubeletv1beta1.KubeletConfiguration{}); err != nil {
		return nil, err
	}
	return jsonValue(js)
}

// jsonValue decodes JSON keeping numbers as written (1000000 stays an
// integer through the merge).
func jsonValue(js []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// mergePatch applies an RFC 7386 JSON merge patch: objects merge key by
// key, null deletes a key, anything else (lists included) replaces.
func mergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = mergePatch(d[k], v)
	}
	return d
}

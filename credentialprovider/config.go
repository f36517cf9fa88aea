package credentialprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1 "k8s.io/kubelet/config/v1"
	credv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"sigs.k8s.io/yaml"
)

// configAPIVersion is the only CredentialProviderConfig version nodekit
// reads; kubelet also reads v1alpha1 and v1beta1 files.
const configAPIVersion = "kubelet.config.k8s.io/v1"

// apiVersions are the exec protocol versions a provider may speak. Their
// request and response carry the same fields nodekit sends and reads.
var apiVersions = []string{
	"credentialprovider.kubelet.k8s.io/v1",
	"credentialprovider.kubelet.k8s.io/v1alpha1",
	"credentialprovider.kubelet.k8s.io/v1beta1",
}

// ReadConfig reads path, a CredentialProviderConfig file or a directory
// whose *.json, *.yaml and *.yml files are read in lexical order and their
// providers merged, as kubelet does. Decoding is strict: an unknown field
// is an error naming it and the file. It does not validate; see
// ValidateConfig.
func ReadConfig(path string) (*kubeletv1.CredentialProviderConfig, error) {
	cfg, _, err := readConfig(path)
	return cfg, err
}

// readConfig is ReadConfig that also returns the configuration's hash, as
// kubelet computes it for kubelet_credential_provider_config_info:
// "sha256:" and the hex SHA-256 of every file read, in order, each as its
// length (8 bytes, big-endian) then its content.
func readConfig(path string) (*kubeletv1.CredentialProviderConfig, string, error) {
	if path == "" {
		return nil, "", errors.New("credential provider config path is empty")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("unable to access path %q: %w", path, err)
	}
	files := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read directory %q: %w", path, err)
		}
		files = files[:0]
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".json", ".yaml", ".yml":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		slices.Sort(files)
		if len(files) == 0 {
			return nil, "", fmt.Errorf("no configuration files found in directory %q", path)
		}
	}
	merged := &kubeletv1.CredentialProviderConfig{}
	seen := sets.New[string]()
	hash := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read file %q: %w", f, err)
		}
		_ = binary.Write(hash, binary.BigEndian, uint64(len(data))) // a hash.Hash never fails a write
		hash.Write(data)
		cfg, err := decodeConfig(f, data)
		if err != nil {
			return nil, "", err
		}
		for _, p := range cfg.Providers {
			if seen.Has(p.Name) {
				return nil, "", fmt.Errorf("duplicate provider name %q found in configuration file(s)", p.Name)
			}
			seen.Insert(p.Name)
			merged.Providers = append(merged.Providers, p)
		}
	}
	return merged, fmt.Sprintf("sha256:%x", hash.Sum(nil)), nil
}

// decodeConfig decodes one file's data strictly.
func decodeConfig(file string, data []byte) (*kubeletv1.CredentialProviderConfig, error) {
	cfg := &kubeletv1.CredentialProviderConfig{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("error decoding config %q: %w", file, err)
	}
	switch {
	case cfg.Kind != "CredentialProviderConfig":
		return nil, fmt.Errorf("error decoding config %q: kind %q, want CredentialProviderConfig", file, cfg.Kind)
	case cfg.APIVersion != configAPIVersion:
		return nil, fmt.Errorf("error decoding config %q: apiVersion %q: nodekit reads %s only", file, cfg.APIVersion, configAPIVersion)
	}
	return cfg, nil
}

// ValidateConfig checks cfg as kubelet v1.37 does, with kubelet's field
// paths and messages. saTokens is the state of the feature gate
// KubeletServiceAccountTokenForCredentialProviders.
func ValidateConfig(cfg *kubeletv1.CredentialProviderConfig, saTokens bool) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("providers")
	if len(cfg.Providers) == 0 {
		errs = append(errs, field.Required(path, "at least 1 item in plugins is required"))
	}
	seen := sets.New[string]()
	for _, p := range cfg.Providers {
		errs = append(errs, validateName(path.Child("name"), p.Name, seen)...)
		switch {
		case p.APIVersion == "":
			errs = append(errs, field.Required(path.Child("apiVersion"), ""))
		case !slices.Contains(apiVersions, p.APIVersion):
			errs = append(errs, field.NotSupported(path.Child("apiVersion"), p.APIVersion, apiVersions))
		}
		if len(p.MatchImages) == 0 {
			errs = append(errs, field.Required(path.Child("matchImages"), "at least 1 item in matchImages is required"))
		}
		for _, m := range p.MatchImages {
			if _, err := parseSchemeless(m); err != nil {
				errs = append(errs, field.Invalid(path.Child("matchImages"), m, "match image is invalid: "+err.Error()))
			}
		}
		if p.DefaultCacheDuration == nil {
			errs = append(errs, field.Required(path.Child("defaultCacheDuration"), ""))
		} else if p.DefaultCacheDuration.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child("defaultCacheDuration"), p.DefaultCacheDuration, "must be greater than or equal to 0"))
		}
		if p.TokenAttributes != nil {
			errs = append(errs, validateTokenAttributes(path.Child("tokenAttributes"), p, saTokens)...)
		}
	}
	return errs
}

func validateName(path *field.Path, name string, seen sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	if strings.Contains(name, "/") {
		errs = append(errs, field.Invalid(path, name, "provider name cannot contain '/'"))
	}
	if strings.Contains(name, " ") {
		errs = append(errs, field.Invalid(path, name, "provider name cannot contain spaces"))
	}
	if name == "." || name == ".." {
		errs = append(errs, field.Invalid(path, name, fmt.Sprintf("provider name cannot be '%s'", name)))
	}
	if seen.Has(name) {
		errs = append(errs, field.Duplicate(path, name))
	}
	seen.Insert(name)
	return errs
}

// validateTokenAttributes is kubelet's validation of tokenAttributes.
func validateTokenAttributes(path *field.Path, p kubeletv1.CredentialProvider, saTokens bool) field.ErrorList {
	var errs field.ErrorList
	if !saTokens {
		errs = append(errs, field.Forbidden(path, "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"))
	}
	ta := p.TokenAttributes
	if ta.ServiceAccountTokenAudience == "" {
		errs = append(errs, field.Required(path.Child("serviceAccountTokenAudience"), ""))
	}
	if ta.RequireServiceAccount == nil {
		errs = append(errs, field.Required(path.Child("requireServiceAccount"), ""))
	}
	if p.APIVersion != credv1.SchemeGroupVersion.String() {
		errs = append(errs, field.Forbidden(path, "tokenAttributes is only supported for "+credv1.SchemeGroupVersion.String()+" API version"))
	}
	if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
		errs = append(errs, field.Forbidden(path.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
	}
	errs = append(errs, validateAnnotationKeys(path.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredServiceAccountAnnotationKeys)...)
	errs = append(errs, validateAnnotationKeys(path.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalServiceAccountAnnotationKeys)...)
	both := sets.New(ta.RequiredServiceAccountAnnotationKeys...).Intersection(sets.New(ta.OptionalServiceAccountAnnotationKeys...))
	if both.Len() > 0 {
		errs = append(errs, field.Invalid(path, sets.List(both), "annotation keys cannot be both required and optional"))
	}
	cacheTypes := []string{string(kubeletv1.ServiceAccountServiceAccountTokenCacheType), string(kubeletv1.TokenServiceAccountTokenCacheType)}
	switch {
	case ta.CacheType == "":
		errs = append(errs, field.Required(path.Child("cacheType"), "cacheType is required to be set when tokenAttributes is specified. Supported values are: "+strings.Join(cacheTypes, ", ")))
	case !slices.Contains(cacheTypes, string(ta.CacheType)):
		errs = append(errs, field.NotSupported(path.Child("cacheType"), ta.CacheType, cacheTypes))
	}
	return errs
}

// validateAnnotationKeys: qualified names (case aside), no duplicates.
func validateAnnotationKeys(path *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for _, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(path, k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(path, k))
		}
		seen.Insert(k)
	}
	return errs
}

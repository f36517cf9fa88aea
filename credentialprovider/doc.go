// Package credentialprovider owns kubelet's image credential provider
// plugins (credentialprovider.kubelet.k8s.io): it reads and validates the
// CredentialProviderConfig file (kubelet's --image-credential-provider-config,
// a file or a directory of them), runs each provider's binary from the
// plugin directory (--image-credential-provider-bin-dir) with a
// CredentialProviderRequest on stdin, and caches the answers per the
// response's cacheKeyType (Image, Registry or Global) for the response's
// cacheDuration or the provider's defaultCacheDuration, collapsing
// concurrent requests for the same image into one run.
//
// Keyring.Lookup gives the credentials for an image in upstream's order,
// ready for CRI PullImage; the image puller (criruntime) tries them after
// the pod's pull secrets; LookupWithAccounts also says, per credential,
// which service account it was given for (nil: the node's own), for the
// image pull records. A provider with tokenAttributes (feature
// KubeletServiceAccountTokenForCredentialProviders) is sent a token of the
// pod's service account, bound to the pod, with the account's required and
// optional annotations; its answers are cached per service account (and
// per token with cacheType Token). Config.ServiceAccounts reads accounts
// and requests tokens; without it such a provider is refused at Load,
// naming the field.
//
// Keyring.RegisterMetrics registers kubelet's plugin metrics with the
// agent's registry: kubelet_credential_provider_plugin_duration and
// kubelet_credential_provider_plugin_errors_total per plugin_name,
// updated on every run of a provider's binary, and
// kubelet_credential_provider_config_info{hash} with kubelet's hash of
// the configuration files (Keyring.ConfigHash).
//
// The package does not pull and does not read pull secrets.
//
// Usage:
//
//	kr, err := credentialprovider.Load(ctx, credentialprovider.Config{
//		ConfigPath: "/etc/kubernetes/credential-providers.yaml",
//		BinDir:     "/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec",
//	})
//	if err != nil {
//		return err // names the file and the field
//	}
//	auths := kr.Lookup(ctx, "registry.example.com/team/app", pod)
package credentialprovider

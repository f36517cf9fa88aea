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
// the pod's pull secrets. It does not pull, does not read pull secrets,
// and does not yet request service-account tokens for providers: a
// provider with tokenAttributes is refused when the config is loaded,
// naming the field.
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

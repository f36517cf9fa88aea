package podopts

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// masterService is the one service every pod gets variables for, whatever
// its enableServiceLinks.
const masterService = "kubernetes"

// serviceEnv adds the service-link variables: the kubernetes service of the
// default namespace always, and every service of the pod's namespace when
// links is set. Services without a cluster IP are skipped.
func (r *Resolver) serviceEnv(ctx context.Context, env *envList, ns string, links bool) error {
	if r.cfg.Services == nil {
		return nil
	}
	byName := map[string]*v1.Service{}
	if links {
		svcs, err := r.cfg.Services.ListServices(ctx, ns)
		if err != nil {
			return fmt.Errorf("failed to list services when setting up env vars: %w", err)
		}
		for _, s := range svcs {
			if (s.Namespace == ns || s.Namespace == "") && hasClusterIP(s) {
				byName[s.Name] = s
			}
		}
	}
	// A service named kubernetes in the pod's own namespace wins over the
	// default namespace's, as upstream.
	if _, ok := byName[masterService]; !ok && (ns != metav1.NamespaceDefault || !links) {
		svcs, err := r.cfg.Services.ListServices(ctx, metav1.NamespaceDefault)
		if err != nil {
			return fmt.Errorf("failed to list services when setting up env vars: %w", err)
		}
		for _, s := range svcs {
			if s.Name == masterService && (s.Namespace == metav1.NamespaceDefault || s.Namespace == "") && hasClusterIP(s) {
				byName[s.Name] = s
			}
		}
	}
	for _, name := range sortedKeys(byName) {
		for _, e := range serviceVars(byName[name]) {
			env.set(e[0], e[1])
		}
	}
	return nil
}

func hasClusterIP(s *v1.Service) bool {
	return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != v1.ClusterIPNone
}

// serviceVars returns the Docker-link style variables of one service, in
// upstream's order, as name/value pairs.
func serviceVars(s *v1.Service) [][2]string {
	if !hasClusterIP(s) || len(s.Spec.Ports) == 0 {
		return nil
	}
	prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
	ip := s.Spec.ClusterIP
	out := [][2]string{
		{prefix + "_SERVICE_HOST", ip},
		{prefix + "_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port))},
	}
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			out = append(out, [2]string{prefix + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port))})
		}
	}
	for i, p := range s.Spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(v1.ProtocolTCP)
		}
		lower := strings.ToLower(proto)
		port := strconv.Itoa(int(p.Port))
		url := lower + "://" + net.JoinHostPort(ip, port)
		if i == 0 {
			out = append(out, [2]string{prefix + "_PORT", url})
		}
		pp := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
		out = append(out,
			[2]string{pp, url},
			[2]string{pp + "_PROTO", lower},
			[2]string{pp + "_PORT", port},
			[2]string{pp + "_ADDR", ip},
		)
	}
	return out
}

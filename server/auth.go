package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// User is an authenticated caller.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Anonymous identities, as upstream: used only when Config.AllowAnonymous
// is set.
const (
	AnonymousUser         = "system:anonymous"
	UnauthenticatedGroup  = "system:unauthenticated"
	AuthenticatedGroup    = "system:authenticated"
	nodesResource         = "nodes"
	nodesAPIVersion       = "v1"
	forbiddenMessage      = "Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n"
	unauthorizedMessage   = "Unauthorized"
	authzErrorMessageForm = "Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)"
)

// Authenticator identifies the caller of a request.
type Authenticator interface {
	// AuthenticateRequest returns the caller, or ok=false when the request
	// carries no credentials this authenticator understands. An error means
	// credentials were presented and are invalid (or could not be checked);
	// the request is refused with 401 either way. It may block on the API
	// server (TokenReview) and must be safe for concurrent use.
	AuthenticateRequest(r *http.Request) (u *User, ok bool, err error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (*User, bool, error)

// AuthenticateRequest calls f.
func (f AuthenticatorFunc) AuthenticateRequest(r *http.Request) (*User, bool, error) { return f(r) }

// Attributes describe one authorization check of a kubelet API request,
// always against the node object: resource "nodes", name = the node.
type Attributes struct {
	User        *User
	Verb        string // create, get, update, patch, delete ("" for other methods)
	APIVersion  string // v1
	Resource    string // nodes
	Subresource string // proxy, stats, metrics, log, pods, healthz, configz, checkpoint
	Name        string // the node name
	Path        string // the request path
}

// Authorizer decides whether a caller may do what the attributes say.
type Authorizer interface {
	// Authorize reports whether the request is allowed, with the
	// authorizer's reason. An error means no decision could be made (the
	// request gets 500). It may block on the API server and must be safe
	// for concurrent use.
	Authorize(ctx context.Context, a Attributes) (allowed bool, reason string, err error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, a Attributes) (bool, string, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, a Attributes) (bool, string, error) {
	return f(ctx, a)
}

// AlwaysAllow authorizes every authenticated request. Use it only when
// authorization is knowingly off (upstream's authorization mode
// AlwaysAllow); New refuses a nil Authorizer so that this is never an
// accident.
type AlwaysAllow struct{}

// Authorize allows.
func (AlwaysAllow) Authorize(context.Context, Attributes) (bool, string, error) {
	return true, "authorization is off", nil
}

// UnionAuthenticator tries each authenticator in order and returns the
// first caller identified. If none identifies the caller, the errors of
// those that failed are returned together.
func UnionAuthenticator(authenticators ...Authenticator) Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (*User, bool, error) {
		var errs []error
		for _, a := range authenticators {
			if a == nil {
				continue
			}
			u, ok, err := a.AuthenticateRequest(r)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				return u, true, nil
			}
		}
		return nil, false, errors.Join(errs...)
	})
}

// isSubpath reports whether path is root or below it, as upstream matches
// kubelet paths ("/stats" covers "/stats/summary" but not "/statsfoo").
func isSubpath(path, root string) bool {
	root = strings.TrimSuffix(root, "/")
	return path == root || (strings.HasPrefix(path, root) && path[len(root)] == '/')
}

// apiVerb maps an HTTP method to the API verb authorized, as upstream
// (HEAD and other methods map to "", which no role grants).
func apiVerb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// RequestAttributes returns the authorization checks of a request to the
// kubelet API of node nodeName, in order; the request is allowed when any
// of them is. As upstream (with the fine-grained kubelet authorization that
// is GA in v1.36+):
//
//	/pods, /runningpods/    nodes/pods, then nodes/proxy
//	/healthz                nodes/healthz, then nodes/proxy
//	/configz                nodes/configz, then nodes/proxy
//	/stats/...              nodes/stats
//	/metrics/...            nodes/metrics
//	/logs/...               nodes/log
//	/checkpoint/...         nodes/checkpoint
//	/statusz                nodes/statusz
//	/flagz                  nodes/configz
//	anything else           nodes/proxy (exec, attach, portForward, containerLogs, ...)
//
// The verb follows the HTTP method: POST create, GET get, PUT update,
// PATCH patch, DELETE delete.
func RequestAttributes(nodeName string, u *User, r *http.Request) []Attributes {
	path := r.URL.Path
	var subresources []string
	switch {
	case isSubpath(path, "/allocatedPods"), isSubpath(path, "/pods"), isSubpath(path, "/runningpods/"):
		subresources = append(subresources, "pods")
	case isSubpath(path, "/healthz"):
		subresources = append(subresources, "healthz")
	case isSubpath(path, "/configz"):
		subresources = append(subresources, "configz")
	}
	switch {
	case isSubpath(path, "/stats/"):
		subresources = append(subresources, "stats")
	case isSubpath(path, "/metrics"):
		subresources = append(subresources, "metrics")
	case isSubpath(path, "/logs/"):
		subresources = append(subresources, "log")
	case isSubpath(path, "/checkpoint/"):
		subresources = append(subresources, "checkpoint")
	case isSubpath(path, "/statusz"):
		subresources = append(subresources, "statusz")
	case isSubpath(path, "/flagz"):
		subresources = append(subresources, "configz")
	default:
		subresources = append(subresources, "proxy")
	}
	verb := apiVerb(r.Method)
	attrs := make([]Attributes, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, Attributes{
			User: u, Verb: verb, APIVersion: nodesAPIVersion, Resource: nodesResource,
			Subresource: sub, Name: nodeName, Path: path,
		})
	}
	return attrs
}

// withAuthenticatedGroup adds system:authenticated to an identified
// caller's groups, as upstream's authenticators do.
func withAuthenticatedGroup(u *User) *User {
	if slices.Contains(u.Groups, AuthenticatedGroup) {
		return u
	}
	c := *u
	c.Groups = append(slices.Clone(u.Groups), AuthenticatedGroup)
	return &c
}

type userKey struct{}

// UserFrom returns the caller a request was authenticated as, if any
// (handlers behind the secure port's filter always have one).
func UserFrom(ctx context.Context) (*User, bool) {
	u, ok := ctx.Value(userKey{}).(*User)
	return u, ok
}

// withAuth authenticates and authorizes every request before next runs:
// 401 without a valid identity, 403 without the right, 500 when the
// authorizer cannot decide.
func (s *Server) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		var u *User
		var ok bool
		var err error
		if s.cfg.Authenticator != nil {
			u, ok, err = s.cfg.Authenticator.AuthenticateRequest(r)
		}
		if err != nil {
			logger.V(2).Info("Unable to authenticate the request", "path", r.URL.Path, "err", err)
			http.Error(w, unauthorizedMessage, http.StatusUnauthorized)
			return
		}
		switch {
		case ok && u != nil:
			u = withAuthenticatedGroup(u)
		case s.cfg.AllowAnonymous:
			u = &User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}
		default:
			http.Error(w, unauthorizedMessage, http.StatusUnauthorized)
			return
		}
		attrs := RequestAttributes(s.cfg.NodeName, u, r)
		var subresources []string
		for _, a := range attrs {
			subresources = append(subresources, a.Subresource)
			allowed, _, err := s.cfg.Authorizer.Authorize(r.Context(), a)
			if err != nil {
				logger.Error(err, "Authorization error", "user", u.Name, "verb", a.Verb, "resource", a.Resource, "subresource", a.Subresource)
				http.Error(w, fmt.Sprintf(authzErrorMessageForm, u.Name, a.Verb, a.Resource, a.Subresource), http.StatusInternalServerError)
				return
			}
			if allowed {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
				return
			}
		}
		logger.V(2).Info("Forbidden", "user", u.Name, "verb", attrs[0].Verb, "path", r.URL.Path, "subresources", subresources)
		http.Error(w, fmt.Sprintf(forbiddenMessage, u.Name, attrs[0].Verb, attrs[0].Resource, subresources), http.StatusForbidden)
	})
}

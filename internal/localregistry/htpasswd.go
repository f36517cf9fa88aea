package localregistry

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// htpasswd renders users (name -> password) as an htpasswd file with
// bcrypt hashes, the only kind the registry accepts. Lines are sorted by
// name so the file is stable.
func htpasswd(users map[string]string) ([]byte, error) {
	names := make([]string, 0, len(users))
	for name := range users {
		names = append(names, name)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, ":\n") {
			return nil, fmt.Errorf("htpasswd: user name %q is empty or has ':' or a newline", name)
		}
		pw := users[name]
		if pw == "" {
			return nil, fmt.Errorf("htpasswd: user %q has an empty password", name)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
		if err != nil {
			return nil, fmt.Errorf("htpasswd: hash password of %q: %w", name, err)
		}
		fmt.Fprintf(&sb, "%s:%s\n", name, hash)
	}
	if sb.Len() == 0 {
		return nil, errors.New("htpasswd: no users")
	}
	return []byte(sb.String()), nil
}

// Package expansion expands $(VAR) references the way Kubernetes does in
// container command, args and env values. It is shared by the runtime
// (command and args) and podopts (env values).
package expansion

// Expand replaces $(NAME) with env[NAME] when NAME is defined; "$$" becomes
// "$"; anything else is left as written.
func Expand(s string, env map[string]string) string {
	var buf []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			buf = append(buf, s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			buf = append(buf, '$')
			i++
		case '(':
			end := -1
			for j := i + 2; j < len(s); j++ {
				if s[j] == ')' {
					end = j
					break
				}
			}
			if end < 0 {
				buf = append(buf, s[i:]...)
				return string(buf)
			}
			name := s[i+2 : end]
			if v, ok := env[name]; ok && name != "" {
				buf = append(buf, v...)
			} else {
				buf = append(buf, s[i:end+1]...)
			}
			i = end
		default:
			buf = append(buf, '$')
		}
	}
	return string(buf)
}

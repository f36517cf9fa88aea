package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
)

const pprofPrefix = "/debug/pprof/"

// debugRoutes adds, with the debugging handlers on, /debug/pprof/ (unless
// DisableProfilingHandler) and /debug/flags/v (when SetVerbosity is set);
// each answers 405 naming itself disabled otherwise, as upstream.
func (s *Server) debugRoutes(mux *http.ServeMux) {
	if s.cfg.DisableProfilingHandler {
		mux.HandleFunc(pprofPrefix, disabledEndpoint("profiling endpoint is disabled."))
	} else {
		// Registered on our own mux (never http.DefaultServeMux); GET
		// only, other methods answer 405 with an Allow header.
		mux.HandleFunc("GET "+pprofPrefix, servePprof)
	}
	if s.cfg.SetVerbosity == nil {
		mux.HandleFunc("/debug/flags/v", disabledEndpoint("flags endpoint is disabled."))
	} else {
		mux.HandleFunc("/debug/flags/v", s.putVerbosity)
	}
}

func disabledEndpoint(msg string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, http.StatusMethodNotAllowed)
	}
}

// servePprof dispatches /debug/pprof/NAME: the four special handlers by
// name, everything else (the index and the named runtime profiles such as
// heap or goroutine) through pprof.Index, which serves a named profile
// itself.
func servePprof(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, pprofPrefix) {
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "cmdline":
		pprof.Cmdline(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}

// putVerbosity serves /debug/flags/v: PUT's body is the new log
// verbosity, handed to Config.SetVerbosity; its answer (or error, 400) is
// the plain-text reply. Other methods answer 406, as upstream.
func (s *Server) putVerbosity(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		plainText(w, http.StatusNotAcceptable, "unsupported http method")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxVerbosityBody))
	if err != nil {
		plainText(w, http.StatusBadRequest, "error reading request body: "+err.Error())
		return
	}
	answer, err := s.cfg.SetVerbosity(string(body))
	if err != nil {
		plainText(w, http.StatusBadRequest, err.Error())
		return
	}
	plainText(w, http.StatusOK, answer)
}

// maxVerbosityBody bounds the body of PUT /debug/flags/v (a number).
const maxVerbosityBody = 1 << 10

func plainText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}

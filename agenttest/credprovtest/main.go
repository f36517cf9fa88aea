// Command credprovtest is a kubelet image credential provider plugin for
// tests (credentialprovider.kubelet.k8s.io/v1 exec protocol). It reads
// the CredentialProviderRequest on stdin, appends the request's image
// (with its service-account token and annotations, if any) as one line to
// the file $CREDPROVTEST_LOG (when set), and answers with
// $CREDPROVTEST_USERNAME and $CREDPROVTEST_PASSWORD for the image's
// registry (or for the -key flag's pattern).
//
// Flags: -cache-key-type (Image, Registry or Global; default Registry),
// -cache-duration (a Go duration; omitted from the response when empty),
// -api-version (of the response; default the request's), -key (the auth
// map's key; default the image's registry), -fail (exit 1 with the
// message on stderr), -token-as-password, -wait-for (after logging, open the FIFO for
// reading: the plugin blocks until the test opens it for writing). agenttest.BuildCredentialProvider builds it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type request struct {
	APIVersion                string            `json:"apiVersion"`
	Kind                      string            `json:"kind"`
	Image                     string            `json:"image"`
	ServiceAccountToken       string            `json:"serviceAccountToken"`
	ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations"`
}

type authConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type response struct {
	APIVersion    string                `json:"apiVersion"`
	Kind          string                `json:"kind"`
	CacheKeyType  string                `json:"cacheKeyType"`
	CacheDuration string                `json:"cacheDuration,omitempty"`
	Auth          map[string]authConfig `json:"auth,omitempty"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("credprovtest", flag.ContinueOnError)
	keyType := fs.String("cache-key-type", "Registry", "cacheKeyType of the response")
	duration := fs.String("cache-duration", "", "cacheDuration of the response (omitted when empty)")
	apiVersion := fs.String("api-version", "", "apiVersion of the response (default: the request's)")
	key := fs.String("key", "", "key of the auth entry (default: the image's registry)")
	fail := fs.String("fail", "", "fail with this message")
	tokenPassword := fs.Bool("token-as-password", false, "answer with the request's service-account token as the password")
	waitFor := fs.String("wait-for", "", "after logging the call, open this FIFO for reading, which blocks until a writer opens it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var req request
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fmt.Errorf("decode request: %w", err)
	}
	if req.Kind != "CredentialProviderRequest" {
		return fmt.Errorf("request kind %q", req.Kind)
	}
	if log := os.Getenv("CREDPROVTEST_LOG"); log != "" {
		f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(f, logLine(req))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if *waitFor != "" {
		f, err := os.Open(*waitFor)
		if err != nil {
			return err
		}
		_ = f.Close()
	}
	if *fail != "" {
		return fmt.Errorf("%s", *fail)
	}
	if *duration != "" {
		d, err := time.ParseDuration(*duration)
		if err != nil {
			return err
		}
		*duration = d.String()
	}
	resp := response{APIVersion: req.APIVersion, Kind: "CredentialProviderResponse", CacheKeyType: *keyType, CacheDuration: *duration}
	if *apiVersion != "" {
		resp.APIVersion = *apiVersion
	}
	k := *key
	if k == "" {
		k, _, _ = strings.Cut(req.Image, "/")
	}
	password := os.Getenv("CREDPROVTEST_PASSWORD")
	if *tokenPassword {
		password = req.ServiceAccountToken
	}
	resp.Auth = map[string]authConfig{k: {Username: os.Getenv("CREDPROVTEST_USERNAME"), Password: password}}
	return json.NewEncoder(out).Encode(resp)
}

// logLine is the image, then with a service-account token " token=T" and
// the annotations " k=v" in key order.
func logLine(req request) string {
	line := req.Image
	if req.ServiceAccountToken != "" {
		line += " token=" + req.ServiceAccountToken
	}
	keys := make([]string, 0, len(req.ServiceAccountAnnotations))
	for k := range req.ServiceAccountAnnotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		line += " " + k + "=" + req.ServiceAccountAnnotations[k]
	}
	return line
}

package localregistry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// The OCI distribution push API, as far as Push needs it: blob uploads in
// one PUT (POST to open, PUT with ?digest= to close), cross-repository
// mounts, manifests by tag.

func (r *Registry) do(req *http.Request) (*http.Response, error) {
	if r.pushCreds != nil {
		req.SetBasicAuth(r.pushCreds.user, r.pushCreds.password)
	}
	return r.client.Do(req)
}

// blobExists says whether repo already has digest.
func (r *Registry) blobExists(ctx context.Context, repo, digest string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, r.pushURL+"/v2/"+repo+"/blobs/"+digest, nil)
	if err != nil {
		return false, err
	}
	resp, err := r.do(req)
	if err != nil {
		return false, fmt.Errorf("HEAD blob %s: %w", digest, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// putBlob uploads size bytes of body as digest into repo, unless there.
func (r *Registry) putBlob(ctx context.Context, repo, digest string, size int64, body io.Reader) error {
	if ok, err := r.blobExists(ctx, repo, digest); err != nil || ok {
		return err
	}
	loc, err := r.startUpload(ctx, repo, nil)
	if err != nil {
		return err
	}
	u, err := url.Parse(loc)
	if err != nil {
		return fmt.Errorf("upload location %q: %w", loc, err)
	}
	base, err := url.Parse(r.pushURL)
	if err != nil {
		return err
	}
	u = base.ResolveReference(u)
	qs := u.Query()
	qs.Set("digest", digest)
	u.RawQuery = qs.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), body)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := r.do(req)
	if err != nil {
		return fmt.Errorf("PUT blob %s: %w", digest, err)
	}
	return expect(resp, http.StatusCreated, "PUT blob "+digest)
}

// mountBlob makes digest of repo from available in repo.
func (r *Registry) mountBlob(ctx context.Context, repo, from, digest string) error {
	if ok, err := r.blobExists(ctx, repo, digest); err != nil || ok {
		return err
	}
	loc, err := r.startUpload(ctx, repo, url.Values{"mount": {digest}, "from": {from}})
	if err != nil {
		return err
	}
	if loc != "" {
		return fmt.Errorf("mount blob %s from %s into %s: the registry opened an upload instead", digest, from, repo)
	}
	return nil
}

// startUpload POSTs to repo's uploads; it returns the upload's Location,
// or "" when the registry answered 201 (a mount done).
func (r *Registry) startUpload(ctx context.Context, repo string, q url.Values) (string, error) {
	u := r.pushURL + "/v2/" + repo + "/blobs/uploads/"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := r.do(req)
	if err != nil {
		return "", fmt.Errorf("POST upload to %s: %w", repo, err)
	}
	if resp.StatusCode == http.StatusCreated {
		_ = resp.Body.Close()
		return "", nil
	}
	if err := expect(resp, http.StatusAccepted, "POST upload to "+repo); err != nil {
		return "", err
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", fmt.Errorf("POST upload to %s: no Location", repo)
	}
	return loc, nil
}

func (r *Registry) putManifest(ctx context.Context, repo, tag, mediaType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.pushURL+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mediaType)
	resp, err := r.do(req)
	if err != nil {
		return fmt.Errorf("PUT manifest %s:%s: %w", repo, tag, err)
	}
	return expect(resp, http.StatusCreated, "PUT manifest "+repo+":"+tag)
}

// expect closes resp and fails unless it has status want, quoting the
// registry's error body.
func expect(resp *http.Response, want int, what string) error {
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == want {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return fmt.Errorf("%s: %s (want %s): %s", what, resp.Status, strconv.Itoa(want), bytes.TrimSpace(msg))
}

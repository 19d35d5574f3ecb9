package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitkit/ratelimit/cmd/limitkit/envoy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// -grpc serves Envoy's rate limit service from -envoy-config's rules and
// the policies a descriptor names; the management page reads the rules on
// GET /envoy/config, and /metrics counts the rules' decisions per policy.
func TestRunEnvoy(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(`domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api
    policy: bucket
`), 0o600)
	policies := filepath.Join(t.TempDir(), "policies.json")
	os.WriteFile(policies, []byte(`{"policies":[{"name":"bucket","algorithm":"tokenbucket","tokenbucket":{"rate":1,"burst":1},"key":"user","apps":["*"]}]}`), 0o600)
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-grpc", "127.0.0.1:0"}, &stdout, &stderr, nil); !errors.Is(err, errUsage) {
		t.Fatalf("-grpc without -envoy-config: %v", err)
	}
	stderr.Reset()
	if err := run(context.Background(), []string{"-grpc", "127.0.0.1:0", "-envoy-config", dir, "-envoy-local-cache", "-1"}, &stdout, &stderr, nil); !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), "-envoy-local-cache -1 is negative") {
		t.Fatalf("a negative -envoy-local-cache: %v, %q", err, stderr.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := run(ctx, []string{"-addr", "127.0.0.1:0", "-token", testToken, "-grpc", "127.0.0.1:0", "-envoy-config", dir, "-envoy-local-cache", "16", "-policies", policies},
		&stdout, &stderr, func(base string) {
			defer cancel()
			m := regexp.MustCompile(`rate limit service \(gRPC\) at (\S+)`).FindStringSubmatch(stdout.String())
			if m == nil {
				t.Errorf("stdout %q gives no gRPC address", stdout.String())
				return
			}
			conn, err := grpc.NewClient(m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			c := rlspb.NewRateLimitServiceClient(conn)
			var codes []rlspb.RateLimitResponse_Code
			for _, kv := range [][2]string{{"user", "alice"}, {"user", "alice"}, {"user", "alice"}, {"api", "bob"}, {"api", "bob"}} {
				resp, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "web",
					Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: kv[0], Value: kv[1]}}}}})
				if err != nil {
					t.Error(err)
					return
				}
				codes = append(codes, resp.OverallCode)
			}
			ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
			if want := []rlspb.RateLimitResponse_Code{ok, ok, over, ok, over}; !equalCodes(codes, want) {
				t.Errorf("codes %v, want %v", codes, want)
			}

			if res := get(t, base+"/envoy/config", ""); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET /envoy/config without the token: %s", res.Status)
			}
			res := get(t, base+"/envoy/config", testToken)
			var view struct {
				Enabled bool
				Domains []struct {
					Domain      string
					Descriptors []struct{ Path, Limit, Policy string }
				}
			}
			if err := json.NewDecoder(res.Body).Decode(&view); err != nil || !view.Enabled || len(view.Domains) != 1 || len(view.Domains[0].Descriptors) != 2 {
				t.Errorf("GET /envoy/config: %+v, %v", view, err)
				return
			}
			d := view.Domains[0].Descriptors
			if d[0].Path != "user" || d[0].Limit != "2 per minute" || d[1].Limit != "policy bucket" {
				t.Errorf("descriptors %+v", d)
			}
			body, _ := io.ReadAll(get(t, base+"/metrics", "").Body)
			if !strings.Contains(string(body), `policy="`+d[0].Policy+`"`) || !strings.Contains(string(body), `policy="bucket"`) {
				t.Errorf("/metrics has no series of %s and bucket", d[0].Policy)
			}
		})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
}

func equalCodes(a, b []rlspb.RateLimitResponse_Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func get(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// An -envoy-config directory without rules shows an empty list of
// domains on the management page, not null, which the page's script
// iterates over.
func TestEnvoyViewOfNoRules(t *testing.T) {
	src, err := envoy.NewSource(t.TempDir(), envoy.SourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal((&server{envoySrc: src}).envoyView())
	if err != nil || !strings.Contains(string(b), `"domains":[]`) {
		t.Fatalf("the view of no rules: %s, %v; want an empty list of domains", b, err)
	}
}

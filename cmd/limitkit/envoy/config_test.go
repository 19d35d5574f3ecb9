package envoy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The cases of envoyproxy/ratelimit's configuration tests (test/config),
// translated into this package's terms: the configuration files are
// testdata/config, written for limitkit after theirs.

const (
	second = rlspb.RateLimitResponse_RateLimit_SECOND
	minute = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour   = rlspb.RateLimitResponse_RateLimit_HOUR
	day    = rlspb.RateLimitResponse_RateLimit_DAY
)

func loadTestConfig(t *testing.T, names ...string) *Config {
	t.Helper()
	var files []File
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("testdata", "config", n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Name: n, Data: data})
	}
	cfg, err := Parse(files)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func es(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

// matchCase is a descriptor and the limit it gets: rpu 0 and no unit for
// none.
type matchCase struct {
	name    string
	domain  string
	entries []Entry
	rpu     uint32
	unit    rlspb.RateLimitResponse_RateLimit_Unit
	path    string
	shadow  bool
	unlim   bool
}

func runMatch(t *testing.T, cfg *Config, cases []matchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := cfg.Match(c.domain, c.entries)
			if c.rpu == 0 && !c.unlim {
				if r != nil {
					t.Fatalf("got the rule %s (%d per %v), want none", r.Path, r.RequestsPerUnit, r.Unit)
				}
				return
			}
			if r == nil {
				t.Fatalf("got no rule, want %d per %v", c.rpu, c.unit)
			}
			if r.Unlimited != c.unlim || r.RequestsPerUnit != c.rpu || r.Unit != c.unit || r.ShadowMode != c.shadow {
				t.Fatalf("got %d per %v (unlimited %v, shadow %v), want %d per %v (unlimited %v, shadow %v)",
					r.RequestsPerUnit, r.Unit, r.Unlimited, r.ShadowMode, c.rpu, c.unit, c.unlim, c.shadow)
			}
			if c.path != "" && r.Path != c.path {
				t.Fatalf("path %q, want %q", r.Path, c.path)
			}
		})
	}
}

// Their TestBasicConfig.
func TestBasicConfig(t *testing.T) {
	cfg := loadTestConfig(t, "basic.yaml")
	const d = "test-domain"
	runMatch(t, cfg, []matchCase{
		{name: "unknown domain", domain: "foo_domain"},
		{name: "no entries", domain: d},
		{name: "value with no rule", domain: d, entries: es("key1", "something")},
		{name: "path with no limit of its own", domain: d, entries: es("key1", "value1")},
		{name: "deeper than the configuration", domain: d, entries: es("key2", "value2", "subkey", "subvalue")},
		{name: "deeper than a value's rule", domain: d, entries: es("key5", "value5", "subkey5", "subvalue")},
		{name: "second-level key default", domain: d, entries: es("key1", "value1", "subkey1", "something"), rpu: 5, unit: second, path: "key1_value1.subkey1"},
		{name: "second-level value", domain: d, entries: es("key1", "value1", "subkey1", "subvalue1"), rpu: 10, unit: second, path: "key1_value1.subkey1_subvalue1"},
		{name: "first-level key default", domain: d, entries: es("key2", "something"), rpu: 20, unit: minute, path: "key2"},
		{name: "first-level value", domain: d, entries: es("key2", "value2"), rpu: 30, unit: minute, path: "key2_value2"},
		{name: "value without a limit", domain: d, entries: es("key2", "value3")},
		{name: "hour", domain: d, entries: es("key3", "foo"), rpu: 1, unit: hour},
		{name: "day", domain: d, entries: es("key4", "foo"), rpu: 1, unit: day},
		{name: "unlimited", domain: d, entries: es("key6", "foo"), unlim: true},
		{name: "detailed_metric, a value", domain: d, entries: es("key7", "unspecified_value"), rpu: 70, unit: minute},
		{name: "detailed_metric, another value", domain: d, entries: es("key7", "another_value"), rpu: 70, unit: minute},
	})
}

// Their TestShadowModeConfig.
func TestShadowModeConfig(t *testing.T) {
	cfg := loadTestConfig(t, "shadow.yaml")
	const d = "test-domain"
	runMatch(t, cfg, []matchCase{
		{name: "not shadowed", domain: d, entries: es("key1", "value1", "subkey1", "something"), rpu: 5, unit: second},
		{name: "shadowed value", domain: d, entries: es("key1", "value1", "subkey1", "subvalue1"), rpu: 10, unit: second, shadow: true},
		{name: "shadowed key", domain: d, entries: es("key2", "something"), rpu: 20, unit: minute, shadow: true},
		{name: "value not shadowed", domain: d, entries: es("key2", "value2"), rpu: 30, unit: minute},
	})
}

// Their TestWildcardConfig.
func TestWildcardConfig(t *testing.T) {
	cfg := loadTestConfig(t, "wildcard.yaml")
	const d = "test-domain"
	same := func(t *testing.T, a, b []Entry) {
		t.Helper()
		ra, _ := cfg.Match(d, a)
		rb, _ := cfg.Match(d, b)
		if ra == nil || ra != rb {
			t.Fatalf("%v and %v: rules %v and %v, want one", a, b, ra, rb)
		}
	}
	t.Run("key without value matches every value", func(t *testing.T) { same(t, es("noVal", "foo1"), es("noVal", "foo2")) })
	t.Run("wildcard matches every value it prefixes", func(t *testing.T) { same(t, es("wild", "foo1"), es("wild", "foo2")) })
	runMatch(t, cfg, []matchCase{
		{name: "wildcard does not match another prefix", domain: d, entries: es("wild", "bar")},
		{name: "a value without * matches itself only", domain: d, entries: es("noWild", "foo1")},
		{name: "* inside a value is no wildcard", domain: d, entries: es("midWildcard", "barab")},
	})
}

// share_threshold (their share_threshold test configuration): values a
// wildcard matches share one counter; an explicit value goes first.
func TestShareThreshold(t *testing.T) {
	cfg := loadTestConfig(t, "share_threshold.yaml")
	const d = "test-domain"
	key := func(kv ...string) (*Rule, string) { return cfg.Match(d, es(kv...)) }
	for _, c := range []struct {
		name string
		a, b []string
		same bool
	}{
		{"top level", []string{"files", "files/a.pdf"}, []string{"files", "files/b.csv"}, true},
		{"nested", []string{"nested", "parent", "files", "nested/file1.txt"}, []string{"nested", "parent", "files", "nested/file2.csv"}, true},
		{"wildcard without share_threshold counts per value", []string{"plain", "p1"}, []string{"plain", "p2"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ra, ka := key(c.a...)
			rb, kb := key(c.b...)
			if ra == nil || ra != rb {
				t.Fatalf("rules %v, %v", ra, rb)
			}
			if (ka == kb) != c.same {
				t.Fatalf("keys %q and %q: same %v, want %v", ka, kb, ka == kb, c.same)
			}
		})
	}
	t.Run("explicit value before the wildcard", func(t *testing.T) {
		r, k := key("file", "test1")
		if r == nil || r.RequestsPerUnit != 50 || k != "file=test1" {
			t.Fatalf("rule %+v key %q", r, k)
		}
		r, k = key("file", "test2")
		if r == nil || r.RequestsPerUnit != 100 || k != "file=test*" {
			t.Fatalf("rule %+v key %q", r, k)
		}
	})
}

// The counter key of a key-only rule counts each value apart, and no two
// lists of entries share one.
func TestCounterKeys(t *testing.T) {
	cfg := loadTestConfig(t, "basic.yaml")
	_, a := cfg.Match("test-domain", es("key2", "a"))
	_, b := cfg.Match("test-domain", es("key2", "b"))
	if a == b {
		t.Fatalf("key2=a and key2=b share the key %q", a)
	}
	for _, pair := range [][2][]Entry{
		{es("a|b", "c"), es("a", "b|c")},
		{es("a=b", "c"), es("a", "b=c")},
		{es("a", "b", "c", "d"), es("a", "b|c=d")},
	} {
		if x, y := counterKey(pair[0], nil, nil), counterKey(pair[1], nil, nil); x == y {
			t.Fatalf("%v and %v make the same key %q", pair[0], pair[1], x)
		}
	}
	if k := counterKey(es("{tag}", "%"), nil, nil); strings.ContainsAny(k, "{}") {
		t.Fatalf("key %q keeps a brace (a Redis Cluster hash tag)", k)
	}
}

// The configurations their loader refuses, with their messages.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		files []File
		want  string
	}{
		{"empty domain", []File{{"empty_domain.yaml", []byte("descriptors:\n  - key: a\n")}},
			"empty_domain.yaml: config file cannot have empty domain"},
		{"duplicate domain", []File{{"a.yaml", []byte("domain: test-domain\n")}, {"duplicate_domain.yaml", []byte("domain: test-domain\n")}},
			"duplicate_domain.yaml: duplicate domain 'test-domain' in config file"},
		{"empty key", []File{{"empty_key.yaml", []byte("domain: d\ndescriptors:\n  - value: v\n")}},
			"empty_key.yaml: descriptor has empty key"},
		{"duplicate key", []File{{"duplicate_key.yaml", []byte("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n")}},
			"duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"},
		{"bad unit", []File{{"bad_limit_unit.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n")}},
			"bad_limit_unit.yaml: invalid rate limit unit 'foo'"},
		{"replaces itself", []File{{"replaces_self.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: me\n      replaces:\n        - name: me\n")}},
			"replaces_self.yaml: replaces should not contain name of same descriptor"},
		{"empty replaces", []File{{"replaces_empty.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n")}},
			"replaces_empty.yaml: should not have an empty replaces entry"},
		{"bad yaml", []File{{"bad_yaml.yaml", []byte("domain: d\ndescriptors: [\n")}},
			"bad_yaml.yaml: error loading config file: yaml: "},
		{"misspelled key", []File{{"misspelled_key.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: second\n")}},
			"misspelled_key.yaml: config error, unknown key 'ratelimit'"},
		{"misspelled nested key", []File{{"misspelled_key2.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requestsperunit: 5\n")}},
			"misspelled_key2.yaml: config error, unknown key 'requestsperunit'"},
		{"key not a string", []File{{"non_string_key.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    0.25: x\n")}},
			"non_string_key.yaml: config error, key is not of type string: 0.25"},
		{"list of non-maps", []File{{"non_map_list.yaml", []byte("domain: d\ndescriptors:\n  - a\n")}},
			"non_map_list.yaml: config error, yaml file contains list of type other than map: a"},
		{"unlimited with a unit", []File{{"unlimited_with_unit.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: day\n")}},
			"unlimited_with_unit.yaml: should not specify rate limit unit when unlimited"},
		{"share_threshold without a wildcard", []File{{"share.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n")}},
			"share.yaml: share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_v'"},
		// limitkit's own keys.
		{"rate_limit and policy", []File{{"p.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    policy: tb\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n")}},
			"p.yaml: 'd.k' has both rate_limit and policy: one decides"},
		{"bad failure_mode", []File{{"f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    failure_mode: maybe\n")}},
			"f.yaml: invalid failure_mode 'maybe' at 'd.k': must be error, open or closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse(c.files)
			if err == nil || cfg != nil {
				t.Fatalf("got %v, %v; want the error %q", cfg, err, c.want)
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("%v does not wrap ErrConfig", err)
			}
			msg := strings.TrimPrefix(err.Error(), ErrConfig.Error()+": ")
			if !strings.HasPrefix(msg, c.want) {
				t.Fatalf("error %q, want %q", msg, c.want)
			}
		})
	}
}

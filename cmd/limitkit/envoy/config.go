// Package envoy serves Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from
// limitkit's limiters, configured by the YAML files of envoyproxy/ratelimit.
//
// A Config is those files read as envoyproxy/ratelimit reads them: a domain
// per file, nested descriptors of key and optional value, a rate_limit of
// requests_per_unit per unit (SECOND to YEAR; WEEK, MONTH and YEAR are fixed
// 7, 30 and 365 days), unlimited, shadow_mode, name and replaces, a value
// ending in '*' as a prefix wildcard, share_threshold. A descriptor is
// matched as theirs is: at each level the entry's key and value, else the
// level's wildcards in file order, else the key alone; a limit applies only
// at the depth of its path, and a key-only limit counts each value apart
// (unless share_threshold, which makes the values a wildcard matches share
// one count).
//
// Two keys are limitkit's own: policy, naming a policy of the server's
// policy store whose algorithm (a token bucket, a sliding window, a sliding
// log) decides the descriptor instead of a rate_limit, and failure_mode
// (error, open or closed), what the descriptor answers when its backend
// cannot decide. envoyproxy/ratelimit refuses files that use them.
//
// Each rate_limit is a fixed window policy (windows aligned to the Unix
// epoch) counting one permit more than requests_per_unit, which stands for
// a count past the limit (theirs counts refused hits), served by a
// policy.Registry over a Source: the memory or Redis backend, its metrics,
// and its live changes (a change of a limit keeps the window's count).
package envoy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/limitkit/ratelimit/fixedwindow"
)

// ErrConfig wraps every error of reading a configuration; the message names
// the file first, as envoyproxy/ratelimit's do ("name: text").
var ErrConfig = errors.New("envoy: invalid configuration")

// File is one configuration file: its name (in errors) and content.
type File struct {
	Name string
	Data []byte
}

// FailureMode is what a descriptor answers when its limiter cannot decide
// (the backend failed, its policy is gone).
type FailureMode uint8

const (
	// FailError answers the call with a gRPC error, so that Envoy applies
	// its failure_mode_deny (the default).
	FailError FailureMode = iota
	// FailOpen answers OK for the descriptor.
	FailOpen
	// FailClosed answers OVER_LIMIT for the descriptor.
	FailClosed
)

var failureModes = map[string]FailureMode{"": FailError, "error": FailError, "open": FailOpen, "closed": FailClosed}

// String is the mode as failure_mode spells it: "error", "open", "closed".
func (f FailureMode) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "error"
}

// Rule is the limit of one descriptor path of a configuration.
type Rule struct {
	Domain string
	// Path is the descriptor's path as envoyproxy/ratelimit names it in its
	// statistics: "key_value.subkey" (the domain left out).
	Path            string
	Name            string // rate_limit.name, for replaces
	Replaces        []string
	RequestsPerUnit uint32
	Unit            rlspb.RateLimitResponse_RateLimit_Unit
	Unlimited       bool
	ShadowMode      bool
	// Policy, when set, names the policy of the server's store that decides
	// the descriptor instead of RequestsPerUnit per Unit.
	Policy      string
	FailureMode FailureMode
	// PolicyName is the name of the fixed window policy the Source makes
	// of the rule ("" for an unlimited rule, one of no requests, or one
	// that names a Policy).
	PolicyName string
}

// Window is the length of the rule's unit.
func (r *Rule) Window() time.Duration { return unitLength(r.Unit) }

// Config is the rule's limit as a fixed window: RequestsPerUnit per
// Window. Its policy counts one permit more (see counting).
func (r *Rule) Config() fixedwindow.Config {
	return fixedwindow.Config{Limit: int(r.RequestsPerUnit), Window: r.Window()}
}

// counting is the configuration of the policy that counts the hits of
// cfg, a limit of envoyproxy/ratelimit's: one permit more than cfg's
// Limit, which stands for "past the limit". envoyproxy/ratelimit adds
// every hit to its count, refused or not, and a descriptor is over its
// limit when the count is; so a check of zero hits is OK in a window whose
// count is exactly the limit, and over it once a refused hit went past.
// The policy's count is that count, up to Limit + 1: a request of n hits
// is within the limit when the policy grants n with at least one permit
// left; otherwise it is past the limit, and the policy's remaining permits
// are taken (fill), so that its count is Limit + 1 until the window ends.
// Hits past Limit + 1 are not counted: a limit raised live within the
// window starts from Limit + 1.
func counting(cfg fixedwindow.Config) fixedwindow.Config {
	cfg.Limit++
	return cfg
}

// unitLength is the fixed length of unit (0 for UNKNOWN or another value).
func unitLength(u rlspb.RateLimitResponse_RateLimit_Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return day
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by "key_value", or "key"
	wildcards []string         // the children's names that end in '*', in file order
	rule      *Rule
	share     bool   // share_threshold
	pattern   string // the wildcard name, for share
}

// Config is a set of configuration files read and checked: immutable, safe
// for concurrent use.
type Config struct {
	domains map[string]*node
	order   []string // domains in file order
	rules   []*Rule  // in file order
}

// Rules returns the configuration's rules, in file order.
func (c *Config) Rules() []*Rule { return c.rules }

// Domains returns the configuration's domains, in file order.
func (c *Config) Domains() []string { return c.order }

// Has reports whether domain is configured.
func (c *Config) Has(domain string) bool { return c.domains[domain] != nil }

// The keys of the format, as envoyproxy/ratelimit accepts them anywhere,
// and limitkit's own.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"name": true, "replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true, "policy": true, "failure_mode": true,
}

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key         string           `yaml:"key"`
	Value       string           `yaml:"value"`
	RateLimit   *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
	ShadowMode  bool             `yaml:"shadow_mode"`
	// Metric names only in envoyproxy/ratelimit: accepted, and counted
	// per policy here.
	DetailedMetric bool   `yaml:"detailed_metric"`
	ValueToMetric  bool   `yaml:"value_to_metric"`
	ShareThreshold bool   `yaml:"share_threshold"`
	Policy         string `yaml:"policy"`
	FailureMode    string `yaml:"failure_mode"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// Parse reads files as one configuration, each a domain (a domain in two
// files is an error). The first error is returned, naming its file.
func Parse(files []File) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		root, err := decode(f)
		if err != nil {
			return nil, err
		}
		if err := c.load(f.Name, root); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func configErr(file, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, file, fmt.Sprintf(format, args...))
}

// decode parses a file, checking its keys as envoyproxy/ratelimit does
// before decoding it.
func decode(f File) (*yamlRoot, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		return nil, configErr(f.Name, "error loading config file: %v", err)
	}
	if len(doc.Content) > 0 {
		if err := checkKeys(f.Name, doc.Content[0]); err != nil {
			return nil, err
		}
	}
	var root yamlRoot
	if err := yaml.Unmarshal(f.Data, &root); err != nil {
		return nil, configErr(f.Name, "error loading config file: %v", err)
	}
	return &root, nil
}

// checkKeys checks every key of a mapping (a string of the format) and
// every value (a list of mappings, a mapping, or a string, integer, boolean
// or null), depth-first. The depth is the file's own, which the YAML parser
// bounds.
func checkKeys(file string, n *yaml.Node) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return configErr(file, "error loading config file: the document is not a mapping")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return configErr(file, "config error, key is not of type string: %v", k.Value)
		}
		if !validKeys[k.Value] {
			return configErr(file, "config error, unknown key '%s'", k.Value)
		}
		for v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		switch v.Kind {
		case yaml.SequenceNode:
			for _, e := range v.Content {
				for e.Kind == yaml.AliasNode {
					e = e.Alias
				}
				if e.Kind != yaml.MappingNode {
					return configErr(file, "config error, yaml file contains list of type other than map: %v", e.Value)
				}
				if err := checkKeys(file, e); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			if err := checkKeys(file, v); err != nil {
				return err
			}
		case yaml.ScalarNode:
			switch v.Tag {
			case "!!str", "!!int", "!!bool", "!!null":
			default:
				return configErr(file, "error checking config")
			}
		}
	}
	return nil
}

func (c *Config) load(file string, root *yamlRoot) error {
	if root.Domain == "" {
		return configErr(file, "config file cannot have empty domain")
	}
	if c.domains[root.Domain] != nil {
		return configErr(file, "duplicate domain '%s' in config file", root.Domain)
	}
	d := &node{children: map[string]*node{}}
	if err := c.loadDescriptors(file, root.Domain, root.Domain+".", d, root.Descriptors); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	c.order = append(c.order, root.Domain)
	return nil
}

var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// loadDescriptors loads descs under parent, whose full key is prefix.
func (c *Config) loadDescriptors(file, domain, prefix string, parent *node, descs []yamlDescriptor) error {
	for _, y := range descs {
		if y.Key == "" {
			return configErr(file, "descriptor has empty key")
		}
		name := y.Key
		if y.Value != "" {
			name += "_" + y.Value
		}
		full := prefix + name
		if parent.children[name] != nil {
			return configErr(file, "duplicate descriptor composite key '%s'", full)
		}
		n := &node{children: map[string]*node{}}
		mode, ok := failureModes[y.FailureMode]
		if !ok {
			return configErr(file, "invalid failure_mode '%s' at '%s': must be error, open or closed", y.FailureMode, full)
		}
		if y.RateLimit != nil && y.Policy != "" {
			return configErr(file, "'%s' has both rate_limit and policy: one decides", full)
		}
		if y.RateLimit != nil {
			r, err := newRule(file, domain, full, y)
			if err != nil {
				return err
			}
			r.FailureMode = mode
			n.rule = r
		} else if y.Policy != "" {
			if !policyNameRE.MatchString(y.Policy) || y.Policy == "." || y.Policy == ".." {
				return configErr(file, "invalid policy name '%s' at '%s'", y.Policy, full)
			}
			n.rule = &Rule{Domain: domain, Path: strings.TrimPrefix(full, domain+"."), Name: y.Policy,
				ShadowMode: y.ShadowMode, Policy: y.Policy, FailureMode: mode}
		}
		if n.rule != nil {
			c.rules = append(c.rules, n.rule)
		}
		wild := strings.HasSuffix(name, "*")
		if y.ShareThreshold && !wild {
			return configErr(file, "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", name)
		}
		n.share, n.pattern = y.ShareThreshold, name
		if wild {
			parent.wildcards = append(parent.wildcards, name)
		}
		if err := c.loadDescriptors(file, domain, full+".", n, y.Descriptors); err != nil {
			return err
		}
		parent.children[name] = n
	}
	return nil
}

// newRule checks a descriptor's rate_limit as envoyproxy/ratelimit does.
func newRule(file, domain, full string, y yamlDescriptor) (*Rule, error) {
	rl := y.RateLimit
	v, known := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(rl.Unit)]
	valid := known && v != int32(rlspb.RateLimitResponse_RateLimit_UNKNOWN)
	if rl.Unlimited && valid {
		return nil, configErr(file, "should not specify rate limit unit when unlimited")
	}
	if !rl.Unlimited && !valid {
		return nil, configErr(file, "invalid rate limit unit '%s'", rl.Unit)
	}
	r := &Rule{
		Domain: domain, Path: strings.TrimPrefix(full, domain+"."), Name: rl.Name,
		RequestsPerUnit: rl.RequestsPerUnit, Unit: rlspb.RateLimitResponse_RateLimit_Unit(v),
		Unlimited: rl.Unlimited, ShadowMode: y.ShadowMode,
	}
	for _, e := range rl.Replaces {
		if e.Name == "" {
			return nil, configErr(file, "should not have an empty replaces entry")
		}
		if e.Name == rl.Name {
			return nil, configErr(file, "replaces should not contain name of same descriptor")
		}
		r.Replaces = append(r.Replaces, e.Name)
	}
	if !r.Unlimited && r.RequestsPerUnit > 0 {
		r.PolicyName = policyName(domain, full)
	}
	return r, nil
}

// policyName is the name of the fixed window policy of the rule at full
// (its domain first): the path in the letters a policy name allows, and a
// hash of it, so that two paths never share a name and a path keeps its
// name, and its counts, across reloads.
func policyName(domain, full string) string {
	sum := sha256.Sum256([]byte(full))
	var b strings.Builder
	b.WriteString("envoy.")
	for _, r := range full {
		if b.Len() >= 100 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	b.WriteByte('.')
	b.WriteString(hex.EncodeToString(sum[:6]))
	return b.String()
}

// Entry is one entry of a request's descriptor.
type Entry struct{ Key, Value string }

// Match returns the rule that decides the descriptor entries in domain, as
// envoyproxy/ratelimit's GetLimit finds it (nil when none does), and the
// descriptor's counter key: its entries, where a share_threshold wildcard
// matched a value, the wildcard instead of the value.
func (c *Config) Match(domain string, entries []Entry) (*Rule, string) {
	d := c.domains[domain]
	if d == nil {
		return nil, ""
	}
	var rule *Rule
	var shared []int // entries whose value a share_threshold wildcard stands for
	var patterns []string
	level := d
	for i, e := range entries {
		name := e.Key + "_" + e.Value
		next := level.children[name]
		wildcard := ""
		if next == nil {
			for _, w := range level.wildcards {
				if strings.HasPrefix(name, strings.TrimSuffix(w, "*")) {
					next, wildcard = level.children[w], w
					break
				}
			}
		}
		if next == nil {
			next = level.children[e.Key]
		}
		if next == nil {
			break
		}
		if wildcard != "" && next.share {
			shared = append(shared, i)
			patterns = append(patterns, strings.TrimPrefix(next.pattern, e.Key+"_"))
		}
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		level = next
	}
	if rule == nil {
		return nil, ""
	}
	return rule, counterKey(entries, shared, patterns)
}

// counterKey encodes entries (with the values of the entries shared
// replaced by patterns) as one key: "key=value|key2=value2", each part
// escaped, so that two lists of entries never make the same key.
func counterKey(entries []Entry, shared []int, patterns []string) string {
	var b bytes.Buffer
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('|')
		}
		escape(&b, e.Key)
		b.WriteByte('=')
		v := e.Value
		for j, s := range shared {
			if s == i {
				v = patterns[j]
			}
		}
		escape(&b, v)
	}
	return b.String()
}

// escape writes s with '%', '|', '=', the braces (Redis Cluster's hash tag)
// and control characters as %XX.
func escape(b *bytes.Buffer, s string) {
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '%' || ch == '|' || ch == '=' || ch == '{' || ch == '}' || ch < 0x20 || ch == 0x7f:
			b.WriteByte('%')
			b.WriteByte(hexd[ch>>4])
			b.WriteByte(hexd[ch&15])
		default:
			b.WriteByte(ch)
		}
	}
}

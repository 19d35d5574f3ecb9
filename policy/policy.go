// Package policy holds named rate-limit policies that a fleet shares and
// changes at run time.
//
// A Policy is a name, an algorithm's configuration (any of the algorithm
// packages' Config values), the key it is counted by ("user", "ip", or
// "global" for one limit shared by every caller) and the applications allowed
// to use it, with who created and last changed it, and when. Policies live in
// a Store: NewRedisStore (shared by every process of a fleet, which learns of
// a change through a pub/sub channel), NewFileStore (a JSON file, for teams
// that keep their configuration in git, reloaded when it changes) or
// NewMemoryStore (one process, tests).
//
// A Registry turns (policy, key, caller) into a decision: it keeps one
// partitioned limiter per policy (memory or Redis backend, see Backend),
// refuses callers outside the policy's applications with ErrForbidden,
// and applies the store's changes to the live limiters: a change of the same
// algorithm reconfigures them in place (control.Reconfigure: their state
// carries over by the algorithm's rule), a change of algorithm replaces them
// (their state starts afresh), a deletion closes them.
//
// NewAdmin serves the store and the registry over HTTP as a JSON API:
// list, get, create, update (compare-and-set on the version) and delete
// policies, reset a key and read a key's current figures.
//
// # JSON
//
// A policy is encoded with its algorithm's name and the configuration under
// that name; durations are Go duration strings ("1m30s"):
//
//	{
//	  "name": "login",
//	  "algorithm": "tokenbucket",
//	  "tokenbucket": {"rate": 5, "burst": 10},
//	  "key": "ip",
//	  "apps": ["web", "mobile"],
//	  "version": 3,
//	  "created_by": "alice", "created_at": "2026-01-02T15:04:05Z",
//	  "updated_by": "bob", "updated_at": "2026-01-03T09:00:00Z"
//	}
//
// The configurations are:
//
//	"tokenbucket":   {"rate": 5, "burst": 10} or {"period": "1s", "per_period": 5, "burst": 10}
//	"fixedwindow":   {"limit": 100, "window": "1m"}
//	"slidingwindow": {"limit": 100, "window": "1m", "segments": 6} (segments 0 or absent: weighted)
//	"slidinglog":    {"limit": 100, "window": "1m"}
//	"concurrency":   {"limit": 10}
//
// and each takes "queue": {"limit": 0, "order": "oldest_first" | "newest_first"}.
// Decoding refuses unknown fields, a key given twice in an object, a
// configuration under another algorithm's name, numbers that do not fit,
// and every value the algorithm's Validate refuses; the error is a
// *FieldError naming the field and the value, in the words of this JSON
// form (a value of the wrong type is named with its JSON type and the type
// wanted).
package policy

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
)

// Errors of this package; test them with errors.Is.
var (
	// ErrInvalidPolicy wraps every validation error (a *FieldError); one
	// that comes from the algorithm's Validate wraps
	// ratelimit.ErrInvalidConfig too.
	ErrInvalidPolicy = errors.New("policy: invalid policy")
	// ErrUnknownPolicy: no policy of that name.
	ErrUnknownPolicy = errors.New("policy: unknown policy")
	// ErrForbidden: the calling application is not in the policy's Apps.
	ErrForbidden = errors.New("policy: application not allowed by the policy")
	// ErrExists: Create of a name that is taken.
	ErrExists = errors.New("policy: policy already exists")
	// ErrConflict: Update or Delete of a version that is not the stored
	// one (someone else changed the policy since it was read).
	ErrConflict = errors.New("policy: version conflict")
	// ErrReadOnly: a write to a store that is read-only (a FileStore).
	ErrReadOnly = errors.New("policy: store is read-only")
	// ErrInvalidKey: an empty key for a policy that is not global, or one
	// longer than MaxKeyLen.
	ErrInvalidKey = errors.New("policy: invalid key")
)

// UndecodableError is Store.List's error when some stored policies cannot
// be decoded (written by a newer version of this package, say, or by hand):
// List returns the others with it, and a Registry keeps applying what it
// applied of these before; Get's for one of them. Its Error names them and
// says why. Replace such a policy (Update at its version) or delete it.
type UndecodableError struct {
	Names []string // sorted
	Err   error    // the decoding errors, joined
}

func (e *UndecodableError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("policy: stored policies %q do not decode", e.Names)
	}
	return e.Err.Error()
}
func (e *UndecodableError) Unwrap() error { return e.Err }

// Global is the Key of a policy that is one limit for every caller: the
// registry ignores the key given with each call.
const Global = "global"

// Bounds on a policy's strings.
const (
	MaxNameLen  = 128  // Name: letters, digits, '.', '_', '-'; not . or ..
	MaxKeyLen   = 1024 // a key passed to the registry, in bytes
	MaxApps     = 256  // entries in Apps
	MaxActorLen = 128  // CreatedBy, UpdatedBy
)

// AnyApp in Apps allows every application.
const AnyApp = "*"

// Algorithm names, as in JSON.
const (
	TokenBucket   = "tokenbucket"
	FixedWindow   = "fixedwindow"
	SlidingWindow = "slidingwindow"
	SlidingLog    = "slidinglog"
	Concurrency   = "concurrency"
)

// Policy is a named limit. The zero value is not valid: Name, Config, Key
// and Apps are required.
type Policy struct {
	// Name identifies the policy: 1 to MaxNameLen letters, digits, '.', '_'
	// or '-', and not . or .. (it appears in URLs and Redis keys).
	Name string
	// Config is the algorithm's configuration: a tokenbucket.Config,
	// fixedwindow.Config, slidingwindow.Config, slidinglog.Config,
	// concurrency.Config or quota.Config (values, not pointers).
	Config ratelimit.Config
	// Key says what the limit is counted by: Global for one limit shared by
	// every caller, or the name of the key the caller passes ("user", "ip",
	// "tenant": same syntax as Name), one limit per key.
	Key string
	// Apps lists the applications allowed to use the policy; AnyApp
	// allows every one. Required: an empty list is invalid rather than
	// silently open to all.
	Apps []string
	// Version counts the policy's changes in its store; stores set it.
	Version int64
	// Audit, set by stores.
	CreatedBy string
	CreatedAt time.Time
	UpdatedBy string
	UpdatedAt time.Time
}

// Algorithm returns the name of p's algorithm ("tokenbucket", ...), or ""
// when Config is not one of the algorithm packages' configs (as a value).
func (p Policy) Algorithm() string {
	if reflect.ValueOf(p.Config).Kind() == reflect.Pointer { // policies hold configs as values
		return ""
	}
	return algo.Name(p.Config)
}

// Allows reports whether app may use the policy.
func (p Policy) Allows(app string) bool {
	for _, a := range p.Apps {
		if a == app || a == AnyApp {
			return true
		}
	}
	return false
}

// FieldError is a validation error: the JSON field (a dotted path such as
// "tokenbucket.burst") and the value refused. It wraps ErrInvalidPolicy, and
// ratelimit.ErrInvalidConfig when the algorithm's Validate refused it.
type FieldError struct {
	Field  string
	Value  string
	Reason string
	err    error
}

func (e *FieldError) Error() string {
	if e.Value == "" { // a key, not a value (an unknown field)
		return fmt.Sprintf("policy: invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("policy: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrInvalidPolicy and the cause, if any.
func (e *FieldError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrInvalidPolicy, e.err}
	}
	return []error{ErrInvalidPolicy}
}

func fieldErr(field string, value any, reason string) *FieldError {
	return &FieldError{Field: field, Value: quoteValue(value), Reason: reason}
}

func quoteValue(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func checkName(field, s string) error {
	if s == "" || len(s) > MaxNameLen || !nameRE.MatchString(s) || s == "." || s == ".." {
		// "." and ".." would be path segments, not names, in a URL.
		return fieldErr(field, s, fmt.Sprintf("must be 1 to %d letters, digits, '.', '_' or '-', and not . or ..", MaxNameLen))
	}
	return nil
}

func checkText(field, s string, max int) error {
	if len(s) > max {
		return fieldErr(field, s, fmt.Sprintf("must be at most %d bytes", max))
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return fieldErr(field, s, "must be printable UTF-8")
		}
	}
	return nil
}

// Validate reports the first invalid field of p as a *FieldError. The
// configuration is checked by its algorithm's Validate, and more: a token
// bucket's rate must be finite (rate.Inf is for code, not for a shared
// policy), windows and periods whole microseconds, and so a sliding
// window's segments (the Redis backend's resolution).
func (p Policy) Validate() error {
	if err := checkName("name", p.Name); err != nil {
		return err
	}
	if p.Config == nil {
		return fieldErr("algorithm", "", "is required")
	}
	alg := p.Algorithm()
	if alg == "" {
		return fieldErr("algorithm", fmt.Sprintf("%T", p.Config), "is not an algorithm of limitkit")
	}
	if err := validateConfig(alg, p.Config); err != nil {
		return err
	}
	if err := checkName("key", p.Key); err != nil {
		return err
	}
	if len(p.Apps) == 0 {
		return fieldErr("apps", "[]", `must list the allowed applications, or "*" for any`)
	}
	if len(p.Apps) > MaxApps {
		return fieldErr("apps", len(p.Apps), fmt.Sprintf("must have at most %d entries", MaxApps))
	}
	for i, a := range p.Apps {
		if a == AnyApp {
			continue
		}
		if err := checkName(fmt.Sprintf("apps[%d]", i), a); err != nil {
			return err
		}
	}
	if p.Version < 0 {
		return fieldErr("version", p.Version, "must not be negative")
	}
	if err := checkText("created_by", p.CreatedBy, MaxActorLen); err != nil {
		return err
	}
	return checkText("updated_by", p.UpdatedBy, MaxActorLen)
}

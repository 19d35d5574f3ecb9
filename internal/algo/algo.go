// Package algo is the one place where the module learns what an algorithm
// is. Each algorithm package (tokenbucket, fixedwindow, ...) registers an
// Algorithm: its name, its reference model, its Redis script and argument
// encoding, and the figures HTTP headers need. The backends and layers ask
// Of(cfg) for a configuration's Descriptor instead of switching on the
// configs' types, so adding an algorithm is its package, its Lua file and
// its one call of Register.
//
// Register instantiates the memory engine (internal/engine) for the
// algorithm's state, so the engine's methods are compiled in the algorithm
// package, and the compiler inlines there only the functions of the
// packages that package imports. So each algorithm package imports sync,
// internal/backend and internal/base, unused but for that: sync.Mutex's,
// the checks' and the leases' fast paths then inline in its decisions
// (BenchmarkAcquire in memory, five alternated rounds: concurrency 37 ns
// with the imports against 43 ns without, the windows 2 to 4 ns less).
package algo

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/backend"
	"github.com/limitkit/ratelimit/internal/check"
	"github.com/limitkit/ratelimit/internal/engine"
	"golang.org/x/time/rate"
)

// Algorithm describes the algorithm whose configuration is C and whose
// model's state is S. Its functions are given a valid configuration (one
// whose Validate returned nil).
type Algorithm[C ratelimit.Config, S any] struct {
	// Name is the algorithm's one spelling: in policies' JSON, metrics,
	// reports and the server's pages.
	Name string
	// Model makes the reference model of c; it validates c.
	Model func(c C) (engine.Model[S], error)
	// Redis encodes c for the algorithm's script (see Redis).
	Redis func(c C, o RedisOptions) (Redis, error)
	// Window is the time within which c allows its limit: a window, or a
	// token bucket's time to fill from empty; 0 when it has none.
	Window func(c C) time.Duration
	// Unit is what c counts, as the RateLimit-Policy's qu says it: ""
	// (requests) or "concurrent-requests".
	Unit string
	// Params are C's fields, in the order policies' JSON lists them.
	Params []Param[C]
	// Describe says c in a few words, for people ("token bucket: 10/s,
	// burst 5").
	Describe func(c C) string
	// Grows is the t of the RateLimit header field for a grant of c that
	// left remaining permits, all back after resetAfter, made at now: the
	// time until the available quota next grows (see backend.Grows); nil
	// when it is never known.
	Grows func(c C, remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool)
}

// Kind is the type of a parameter's value.
type Kind uint8

const (
	Count    Kind = iota // an int: a limit, a burst, a number of segments
	Duration             // a time.Duration: a window, a period
	Rate                 // a float64 of permits per second (rate.Limit)
	Queue                // a ratelimit.Queue
	Text                 // a string: a name, such as a calendar period or a time zone
)

// Param is one field of an algorithm's configuration C, as policies' JSON
// and the server's pages name it. Get returns and Set takes a value of its
// Kind's type (int, time.Duration, float64, ratelimit.Queue or string).
type Param[C any] struct {
	Name string // "rate", "burst", "per_period", "window", ...
	Kind Kind
	// Choices, for a Text, are the values it may take, which policies
	// check before Set is called ("" may always be given to Set: the
	// zero value); nil for any string, which the configuration's
	// Validate checks.
	Choices []string
	Get     func(c C) any
	Set     func(c *C, v any)
}

// Field is a parameter's name and kind, and for a Text its Choices.
type Field struct {
	Name    string
	Kind    Kind
	Choices []string
}

// Value is a parameter of a configuration, with its value.
type Value struct {
	Field
	V any
}

// RedisOptions are the Redis backend's options an encoding may need.
type RedisOptions struct {
	LeaseTTL time.Duration // how long a concurrency holder lives without renewal
}

// Redis is a configuration as the Redis backend runs it.
type Redis struct {
	// Lua names the script's parts, the .lua files of the redis package
	// without their extension, in the order they are joined (between the
	// prelude and the batch loop).
	Lua []string
	// Suffixes are those of the keys the script reads, after
	// prefix{key}.
	Suffixes []string
	// Args are the algorithm's parameters, after the call's now, permits
	// and op.
	Args []any
	// PerCall, when not nil, gives the arguments of each call that depend
	// on the time, computed from the caller's clock at local: they follow
	// the parameters, before the op's own arguments. The script still
	// decides at its own instant (Redis's TIME): such arguments describe
	// the time around local (for a calendar quota, the boundaries of the
	// previous, current and next periods, which a script cannot compute
	// without the time zone database), for the script to pick the part
	// its instant falls in. The slice it returns is only read.
	PerCall func(local time.Time) []any
	// Unlimited: every request is granted (a token bucket of rate.Inf).
	Unlimited bool
	// What the script does beyond deciding, as the model does: filled by
	// the Descriptor from the model's Caps, never by an algorithm's Redis
	// function. Reserves: Wait reserves in the script (engine.Reserves:
	// token bucket). Holds: a grant holds its permits until released
	// (engine.Releases: concurrency). Settles: a grant can be settled
	// (engine.Charges, control.Settle): the script takes back a part of it
	// (its refund) and charges more at now (its charge op), as the model's
	// Refund and Charge do.
	Reserves, Holds, Settles bool
}

// Descriptor is an algorithm bound to one configuration.
type Descriptor interface {
	// Name is the algorithm's name (see Algorithm.Name).
	Name() string
	// Memory makes the memory backend's limiters of the configuration, on
	// clock (nil: the monotonic clock).
	Memory(clock ratelimit.Clock) (engine.Builder, error)
	// Redis encodes the configuration for the Redis backend.
	Redis(o RedisOptions) (Redis, error)
	// Window, Unit and Describe are the Algorithm's, for the
	// configuration.
	Window() time.Duration
	Unit() string
	Describe() string
	// Values are the configuration's parameters, in the Algorithm's order.
	Values() []Value
	// Grows is the Algorithm's Grows for the configuration, nil when it
	// has none: what a backend gives its grants' Info.
	Grows() backend.Grows
	// Holds reports whether a grant holds its permits until it is
	// released (a concurrency limit), rather than spending them.
	Holds() bool
}

// entry is a registered Algorithm, whatever its types.
type entry interface {
	bind(cfg ratelimit.Config) (Descriptor, bool)
	fields() []Field
	build(values map[string]any) ratelimit.Config
	window(cfg ratelimit.Config) time.Duration
	unit() string
	grows(cfg ratelimit.Config) backend.Grows
}

// The registry is written by Register, from init functions, which run one
// after another before main; after that it is only read, without a lock.
var (
	byType = map[reflect.Type]entry{}
	byName = map[string]entry{}
)

// Register records a, the algorithm of the configurations of type C (and
// *C). Each algorithm package calls it once, from init (never later: the
// registry is read without a lock).
func Register[C ratelimit.Config, S any](a *Algorithm[C, S]) {
	t := reflect.TypeFor[C]()
	if _, dup := byType[t]; dup {
		panic("algo: " + t.String() + " registered twice")
	}
	if _, dup := byName[a.Name]; dup {
		panic("algo: algorithm name " + strconv.Quote(a.Name) + " registered twice")
	}
	byType[t], byName[a.Name] = a, a
}

// Of returns the descriptor of cfg, a configuration of a registered
// algorithm or a non-nil pointer to one. Any other cfg, nil included, is an
// error wrapping ratelimit.ErrInvalidConfig, prefixed by pkg. Of does not
// validate cfg.
func Of(pkg string, cfg ratelimit.Config) (Descriptor, error) {
	if err := check.Config(pkg, cfg); err != nil {
		return nil, err
	}
	cfg = check.Value(cfg)
	e, ok := byType[reflect.TypeOf(cfg)]
	if !ok {
		return nil, fmt.Errorf("%w: %s: unsupported config type %T", ratelimit.ErrInvalidConfig, pkg, cfg)
	}
	d, _ := e.bind(cfg)
	return d, nil
}

// Name is the name of cfg's algorithm, "" when cfg is not a registered
// algorithm's configuration.
func Name(cfg ratelimit.Config) string {
	if d, err := Of("", cfg); err == nil {
		return d.Name()
	}
	return ""
}

// Window is Of(cfg).Window() without the descriptor, for a caller on a hot
// path (it allocates nothing); 0 for a cfg of no algorithm.
func Window(cfg ratelimit.Config) time.Duration {
	if e, cfg := lookup(cfg); e != nil {
		return e.window(cfg)
	}
	return 0
}

// Unit is Of(cfg).Unit() without the descriptor (see Window); "" for a
// cfg of no algorithm.
func Unit(cfg ratelimit.Config) string {
	if e, _ := lookup(cfg); e != nil {
		return e.unit()
	}
	return ""
}

// lookup is the entry of cfg's algorithm, and cfg as a value; nil for a cfg
// of no algorithm.
func lookup(cfg ratelimit.Config) (entry, ratelimit.Config) {
	if cfg == nil || check.IsNil(cfg) {
		return nil, nil
	}
	cfg = check.Value(cfg)
	return byType[reflect.TypeOf(cfg)], cfg
}

// GrowsAfter is Of(cfg).Grows() at a grant's figures, without the
// descriptor (see Window); ok is false for a cfg of no algorithm.
func GrowsAfter(cfg ratelimit.Config, remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool) {
	if e, cfg := lookup(cfg); e != nil {
		if g := e.grows(cfg); g != nil {
			return g.GrowsAfter(remaining, resetAfter, now)
		}
	}
	return 0, false
}

// UntilNext is how long from now until the next multiple of p since the
// Unix epoch (p when now is one): the end of an epoch-aligned window.
func UntilNext(now time.Time, p time.Duration) time.Duration {
	n := now.UnixNano()
	return time.Duration(check.FloorStart(n, int64(p)) + int64(p) - n)
}

// Fields lists the parameters of the algorithm called name; ok is false for
// an unknown name.
func Fields(name string) (fields []Field, ok bool) {
	e, ok := byName[name]
	if !ok {
		return nil, false
	}
	return e.fields(), true
}

// Build returns the configuration of the algorithm called name whose
// parameters have values (by name, each of its Kind's type; a missing one
// is zero). It does not validate the configuration: call its Validate.
// ok is false for an unknown name.
func Build(name string, values map[string]any) (cfg ratelimit.Config, ok bool) {
	e, ok := byName[name]
	if !ok {
		return nil, false
	}
	return e.build(values), true
}

// Names lists the registered algorithms' names, sorted.
func Names() []string {
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (a *Algorithm[C, S]) bind(cfg ratelimit.Config) (Descriptor, bool) {
	c, ok := cfg.(C)
	if !ok {
		return nil, false
	}
	return bound[C, S]{a: a, c: c}, true
}

func (a *Algorithm[C, S]) window(cfg ratelimit.Config) time.Duration {
	if a.Window == nil {
		return 0
	}
	return a.Window(cfg.(C))
}

func (a *Algorithm[C, S]) unit() string { return a.Unit }

func (a *Algorithm[C, S]) grows(cfg ratelimit.Config) backend.Grows {
	if a.Grows == nil {
		return nil
	}
	c := cfg.(C)
	return backend.GrowsFunc(func(remaining int64, resetAfter time.Duration, now time.Time) (time.Duration, bool) {
		return a.Grows(c, remaining, resetAfter, now)
	})
}

func (a *Algorithm[C, S]) fields() []Field {
	fs := make([]Field, len(a.Params))
	for i, p := range a.Params {
		fs[i] = Field{p.Name, p.Kind, p.Choices}
	}
	return fs
}

func (a *Algorithm[C, S]) build(values map[string]any) ratelimit.Config {
	var c C
	for _, p := range a.Params {
		if v, ok := values[p.Name]; ok {
			p.Set(&c, v)
		}
	}
	return c
}

// bound is an Algorithm bound to a configuration c.
type bound[C ratelimit.Config, S any] struct {
	a *Algorithm[C, S]
	c C
}

func (b bound[C, S]) Name() string { return b.a.Name }

func (b bound[C, S]) Unit() string { return b.a.Unit }

func (b bound[C, S]) Window() time.Duration { return b.a.window(b.c) }

func (b bound[C, S]) Describe() string { return b.a.Describe(b.c) }

func (b bound[C, S]) Grows() backend.Grows { return b.a.grows(b.c) }

func (b bound[C, S]) Holds() bool {
	m, err := b.a.Model(b.c)
	return err == nil && m.Caps()&engine.Releases != 0
}

func (b bound[C, S]) Values() []Value {
	vs := make([]Value, len(b.a.Params))
	for i, p := range b.a.Params {
		vs[i] = Value{Field{p.Name, p.Kind, p.Choices}, p.Get(b.c)}
	}
	return vs
}

func (b bound[C, S]) Redis(o RedisOptions) (Redis, error) {
	r, err := b.a.Redis(b.c, o)
	if err != nil {
		return Redis{}, err
	}
	m, err := b.a.Model(b.c)
	if err != nil {
		return Redis{}, err
	}
	caps := m.Caps()
	r.Reserves, r.Holds, r.Settles = caps&engine.Reserves != 0, caps&engine.Releases != 0, caps&engine.Charges != 0
	return r, nil
}

// Memory's model maker refuses a configuration of another algorithm, as
// Reconfigure must.
func (b bound[C, S]) Memory(clock ratelimit.Clock) (engine.Builder, error) {
	a := b.a
	return engine.Make(b.c, func(cfg ratelimit.Config) (engine.Model[S], backend.Grows, error) {
		c, ok := cfg.(C)
		if !ok {
			return nil, nil, fmt.Errorf("%w: memory: Reconfigure with a %T, of another algorithm", ratelimit.ErrInvalidConfig, cfg)
		}
		m, err := a.Model(c)
		return m, a.grows(c), err
	}, clock)
}

// Micros is d in whole microseconds, Redis's clock resolution; a d with a
// fraction of one is an error naming field.
func Micros(field string, d time.Duration) (int64, error) {
	if d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%w: redis: %s %v is not a whole number of microseconds", ratelimit.ErrInvalidConfig, field, d)
	}
	return int64(d / time.Microsecond), nil
}

// LuaNumber formats f for the scripts' tonumber: exactly (the shortest
// form that reads back as f), and with a decimal point, without which
// gopher-lua's tonumber (miniredis's) reads no exponent and no more than
// 19 digits: "1e+20" is sent as "1.0e+20". rate.Inf (which reaches a
// script only in a reservation's cancel) is "+Inf", which strtod reads.
func LuaNumber(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if math.IsInf(f, 0) {
		return s
	}
	switch i := strings.IndexByte(s, 'e'); {
	case strings.IndexByte(s, '.') >= 0:
		return s
	case i >= 0:
		return s[:i] + ".0" + s[i:]
	}
	return s + ".0"
}

// Str makes the Param of kind Text of the string field of C that f points
// to, which may take the values choices (any string when there are none).
func Str[C any, T ~string](name string, f func(*C) *T, choices ...string) Param[C] {
	return Param[C]{Name: name, Kind: Text, Choices: choices, Get: func(c C) any { return string(*f(&c)) }, Set: func(c *C, v any) { *f(c) = T(v.(string)) }}
}

// Int, Dur, PerSecond and QueueOf make the Param of the field of C that f
// points to, of kind Count, Duration, Rate and Queue.
func Int[C any](name string, f func(*C) *int) Param[C] {
	return Param[C]{Name: name, Kind: Count, Get: func(c C) any { return *f(&c) }, Set: func(c *C, v any) { *f(c) = v.(int) }}
}

func Dur[C any](name string, f func(*C) *time.Duration) Param[C] {
	return Param[C]{Name: name, Kind: Duration, Get: func(c C) any { return *f(&c) }, Set: func(c *C, v any) { *f(c) = v.(time.Duration) }}
}

func PerSecond[C any](name string, f func(*C) *rate.Limit) Param[C] {
	return Param[C]{Name: name, Kind: Rate, Get: func(c C) any { return float64(*f(&c)) }, Set: func(c *C, v any) { *f(c) = rate.Limit(v.(float64)) }}
}

func QueueOf[C any](f func(*C) *ratelimit.Queue) Param[C] {
	return Param[C]{Name: "queue", Kind: Queue, Get: func(c C) any { return *f(&c) }, Set: func(c *C, v any) { *f(c) = v.(ratelimit.Queue) }}
}

// Short is d as time.Duration's String writes it, without the zero units
// after the largest ("1m", not "1m0s"; "1h", not "1h0m0s"): how policies
// and the server's pages write durations.
func Short(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
		if t, ok := strings.CutSuffix(s, "h0m"); ok {
			s = t + "h"
		}
	}
	return s
}

// NextToken is the time until a bucket that refills a token every
// perToken nanoseconds, all full after resetAfter, next gains a whole
// token: resetAfter modulo perToken (perToken for a full bucket), rounded
// up to the nanosecond. What tokenbucket tells as a grant's GrowsAfter
// (ratelimit.FromRate's says the same).
func NextToken(resetAfter time.Duration, perToken float64) time.Duration {
	ns := perToken
	if resetAfter > 0 {
		if r := math.Mod(float64(resetAfter), perToken); r > 0 {
			ns = r
		}
	}
	return time.Duration(math.Ceil(ns))
}

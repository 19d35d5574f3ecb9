package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/internal/algo"
	"github.com/limitkit/ratelimit/internal/strictjson"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/policy"
	"github.com/limitkit/ratelimit/redis"
)

// Bounds on what a demo may ask, so that no visitor can exhaust the server.
const (
	maxDemoBody       = 16 << 10
	maxDemoLimit      = 1000      // limit, burst, per_period: a sliding log holds up to this many grants
	maxDemoRate       = 10_000    // token bucket rate, per second
	maxDemoWindow     = time.Hour // window, period
	maxEdgeWindow     = 10 * time.Second
	maxBurst          = 1000 // requests in a burst (per half for the window-edge scenario)
	maxSteadyRate     = 200  // requests per second
	maxSteadySeconds  = 60   // duration of a steady run
	maxHold           = 5 * time.Second
	maxSessions       = 256 // demo sessions held at once
	sessionIdle       = 30 * time.Minute
	maxRuns           = 16 // runs streaming at once, all sessions
	maxSessionRuns    = 2  // runs streaming at once in one session
	maxDemoKeyLen     = 64
	defaultHold       = 250 * time.Millisecond
	demoDecideTimeout = 2 * time.Second
)

// demo serves the demo page's API: sessions that hold one or two limiters
// (built from the parameters the page sends, or a stored policy used
// read-only), and runs of traffic whose decisions stream back as
// Server-Sent Events.
type demo struct {
	reg   *policy.Registry
	redis goredis.UniversalClient
	runs  chan struct{} // one token per run streaming

	// maxSessions and sessionIdle bound the sessions held (tests lower
	// them): past sessionIdle a session's limiters are closed when a new
	// session is made, and at maxSessions the least recently used idle one
	// makes room.
	maxSessions int
	sessionIdle time.Duration

	stopOnce sync.Once
	stopped  chan struct{} // closed at shutdown: runs end their streams

	mu       sync.Mutex
	sessions map[string]*session
	closed   bool
}

// session is one visitor's limiters: slot "a" and, side by side, slot "b".
type session struct {
	id string

	mu       sync.Mutex
	lastUsed time.Time
	running  int
	slots    map[string]*slot
}

// slot is a limiter of a session and the spec it was made from.
type slot struct {
	spec    string // canonical form: the same spec keeps the limiter and its state
	label   string
	acquire func(ctx context.Context) (ratelimit.Lease, error)
	close   func() error
	holds   bool          // a concurrency limit: grants are released after the run's hold
	window  time.Duration // the window or refill period, if any
	fixed   bool          // a fixed window: its window is the edge scenario's
}

func newDemo(reg *policy.Registry, client goredis.UniversalClient) *demo {
	return &demo{
		reg:         reg,
		redis:       client,
		runs:        make(chan struct{}, maxRuns),
		maxSessions: maxSessions,
		sessionIdle: sessionIdle,
		stopped:     make(chan struct{}),
		sessions:    map[string]*session{},
	}
}

// stop tells every run to end its stream.
func (d *demo) stop() { d.stopOnce.Do(func() { close(d.stopped) }) }

// close stops the runs and closes every session's limiters.
func (d *demo) close() {
	d.stop()
	d.mu.Lock()
	sessions := d.sessions
	d.sessions, d.closed = map[string]*session{}, true
	d.mu.Unlock()
	for _, s := range sessions {
		s.closeSlots()
	}
}

func (s *session) closeSlots() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, sl := range s.slots {
		sl.close()
		delete(s.slots, name)
	}
}

// createSession makes a session: {"id": "..."}. The id goes in request
// bodies, never in a URL.
func (d *demo) createSession(w http.ResponseWriter, r *http.Request) {
	b := make([]byte, 16)
	rand.Read(b)
	s := &session{id: hex.EncodeToString(b), lastUsed: time.Now(), slots: map[string]*slot{}}
	var evicted []*session
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		fail(w, http.StatusServiceUnavailable, "", "", "the server is shutting down")
		return
	}
	now := time.Now()
	var oldest *session
	var oldestUse time.Time
	for id, o := range d.sessions {
		o.mu.Lock()
		idle, last := o.running == 0, o.lastUsed
		o.mu.Unlock()
		switch {
		case idle && now.Sub(last) > d.sessionIdle:
			delete(d.sessions, id)
			evicted = append(evicted, o)
		case idle && (oldest == nil || last.Before(oldestUse)):
			oldest, oldestUse = o, last
		}
	}
	if len(d.sessions) >= d.maxSessions {
		if oldest == nil {
			d.mu.Unlock()
			fail(w, http.StatusServiceUnavailable, "", "", "too many demo sessions running; try again later")
			return
		}
		delete(d.sessions, oldest.id)
		evicted = append(evicted, oldest)
	}
	d.sessions[s.id] = s
	d.mu.Unlock()
	for _, o := range evicted {
		o.closeSlots()
	}
	writeJSON(w, http.StatusCreated, map[string]string{"id": s.id})
}

// demoPolicy is a stored policy as the demo page lists it.
type demoPolicy struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Label     string `json:"label"`
	Key       string `json:"key"`
}

// policies lists the stored policies the demo may try: those that allow
// the demo application and count per key (a global policy is every
// caller's limit, which a demo must not spend).
func (d *demo) policies(w http.ResponseWriter, r *http.Request) {
	list := []demoPolicy{}
	for _, p := range d.reg.Policies() {
		if p.Allows(demoApp) && p.Key != policy.Global {
			list = append(list, demoPolicy{Name: p.Name, Algorithm: p.Algorithm(), Label: describe(p.Config), Key: p.Key})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"policies": list})
}

// runRequest is the body of POST /demo/run.
type runRequest struct {
	Session string          `json:"session"`
	A       json.RawMessage `json:"a"` // a limiter spec: see parseSpec
	B       json.RawMessage `json:"b"` // optional: a second limiter on the same traffic
	Traffic traffic         `json:"traffic"`
}

// traffic is what a run sends to the limiters.
type traffic struct {
	Mode    string          `json:"mode"`    // "one", "burst", "steady" or "edge"
	N       int             `json:"n"`       // burst: requests; edge: requests on each side of the edge
	Rate    float64         `json:"rate"`    // steady: requests per second
	Seconds float64         `json:"seconds"` // steady: how long
	Hold    policy.Duration `json:"hold"`    // concurrency grants are released after this
}

// fieldError is a 400 naming the field.
type fieldError struct{ field, value, msg string }

func (e *fieldError) Error() string { return e.msg }

func badField(field string, value any, format string, args ...any) *fieldError {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	return &fieldError{field: field, value: fmt.Sprint(value), msg: msg}
}

func (t *traffic) validate() error {
	switch t.Mode {
	case "one":
		t.N = 1
	case "burst", "edge":
		if t.N < 1 || t.N > maxBurst {
			return badField("traffic.n", t.N, "must be 1 to %d", maxBurst)
		}
	case "steady":
		if !(t.Rate > 0 && t.Rate <= maxSteadyRate) {
			return badField("traffic.rate", t.Rate, "must be above 0 and at most %d per second", maxSteadyRate)
		}
		if !(t.Seconds > 0 && t.Seconds <= maxSteadySeconds) {
			return badField("traffic.seconds", t.Seconds, "must be above 0 and at most %d", maxSteadySeconds)
		}
		if t.Rate*t.Seconds < 1 {
			return badField("traffic.seconds", t.Seconds, "sends no request at %g per second", t.Rate)
		}
	default:
		return badField("traffic.mode", t.Mode, `must be "one", "burst", "steady" or "edge"`)
	}
	if t.Hold < 0 || time.Duration(t.Hold) > maxHold {
		return badField("traffic.hold", t.Hold, "must be 0 to %v", policy.Duration(maxHold))
	}
	if t.Hold == 0 {
		t.Hold = policy.Duration(defaultHold)
	}
	return nil
}

// decodeRun reads and checks a run's body: strictly (a key given twice,
// an unknown field, trailing data are refused), in JSON's words; a body
// over maxDemoBody is an *http.MaxBytesError, white space after the object
// included.
func decodeRun(r *http.Request) (runRequest, error) {
	var req runRequest
	if err := strictjson.Decode(http.MaxBytesReader(nil, r.Body, maxDemoBody), &req); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return req, &fieldError{field: se.Field, value: se.Value, msg: se.Error()}
		}
		return req, err
	}
	if req.Session == "" {
		return req, badField("session", "", "required: create one with POST /demo/sessions")
	}
	if len(bytes.TrimSpace(req.A)) == 0 || string(bytes.TrimSpace(req.A)) == "null" {
		return req, badField("a", "", "required: a limiter")
	}
	return req, req.Traffic.validate()
}

// spec is a parsed limiter spec, not yet made.
type spec struct {
	canonical string
	label     string
	cfg       ratelimit.Config // nil for a stored policy
	policy    string
	key       string
}

// parseSpec reads one limiter spec: either an algorithm and its
// configuration, in the policy package's JSON form,
//
//	{"algorithm": "fixedwindow", "fixedwindow": {"limit": 10, "window": "1s"}}
//
// or a stored policy, used read-only on a key of the demo's own,
//
//	{"policy": "demo", "key": "visitor-1"}
//
// Errors name the field, under name ("a.fixedwindow.limit").
func (d *demo) parseSpec(name string, raw json.RawMessage) (spec, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return spec{}, badField(name, string(raw), "must be an object")
	}
	if _, ok := fields["policy"]; ok {
		var ps struct {
			Policy string `json:"policy"`
			Key    string `json:"key"`
		}
		if err := strictjson.Unmarshal(raw, &ps); err != nil {
			var se *strictjson.Error
			if errors.As(err, &se) && se.Field != "" {
				return spec{}, &fieldError{field: name + "." + se.Field, value: se.Value,
					msg: fmt.Sprintf("%s.%s (a stored policy is {\"policy\": name, \"key\": key})", name, se.Error())}
			}
			return spec{}, badField(name, "", "a stored policy is {\"policy\": name, \"key\": key}: %v", err)
		}
		p, ok := d.reg.Policy(ps.Policy)
		switch {
		case !ok:
			return spec{}, badField(name+".policy", ps.Policy, "no such policy")
		case !p.Allows(demoApp):
			return spec{}, badField(name+".policy", ps.Policy, "the policy does not allow the %q application", demoApp)
		case p.Key == policy.Global:
			return spec{}, badField(name+".policy", ps.Policy, "a global policy is every caller's limit: the demo does not spend it")
		}
		if ps.Key == "" || len(ps.Key) > maxDemoKeyLen || strings.IndexFunc(ps.Key, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '{' || r == '}' }) >= 0 {
			return spec{}, badField(name+".key", ps.Key, "must be 1 to %d printable characters, without spaces or braces", maxDemoKeyLen)
		}
		return spec{
			canonical: "policy\x00" + ps.Policy + "\x00" + ps.Key,
			label:     fmt.Sprintf("policy %s (%s), key %s", ps.Policy, describe(p.Config), demoKey(ps.Key)),
			policy:    ps.Policy,
			key:       ps.Key,
		}, nil
	}

	if _, ok := fields["algorithm"]; !ok {
		return spec{}, badField(name+".algorithm", "", "required (or \"policy\" for a stored policy)")
	}
	// The policy package decodes and validates the configuration, naming
	// the field: the demo adds a name, key and application of its own.
	fields["name"], _ = json.Marshal("demo-" + name)
	fields["key"], _ = json.Marshal("demo")
	fields["apps"], _ = json.Marshal([]string{demoApp})
	doc, _ := json.Marshal(fields)
	p, err := policy.Decode(bytes.NewReader(doc))
	if err != nil {
		var fe *policy.FieldError
		if errors.As(err, &fe) {
			field := name + "." + fe.Field
			if fe.Field == "" || fe.Field == "name" || fe.Field == "key" || fe.Field == "apps" {
				field = name
			}
			msg := name + "." + fe.Field
			if fe.Value != "" {
				msg += " " + fe.Value
			}
			return spec{}, &fieldError{field: field, value: fe.Value, msg: msg + ": " + fe.Reason}
		}
		return spec{}, badField(name, "", "%v", err)
	}
	if err := checkBounds(name, p.Config); err != nil {
		return spec{}, err
	}
	canon, _ := p.MarshalJSON()
	return spec{canonical: string(canon), label: describe(p.Config), cfg: p.Config}, nil
}

// demoKey is the registry key the demo spends for a visitor's key, apart
// from every real caller's.
func demoKey(key string) string { return "demo:" + key }

// maxDemoSegments bounds a sliding window's segments, which the page
// draws.
const maxDemoSegments = 100

// checkBounds refuses configurations bigger than a demo needs: counts over
// maxDemoLimit (segments over maxDemoSegments), rates over maxDemoRate,
// windows and periods over maxDemoWindow.
func checkBounds(name string, cfg ratelimit.Config) error {
	d, err := algo.Of("demo", cfg)
	if err != nil {
		return badField(name+".algorithm", fmt.Sprintf("%T", cfg), "not an algorithm of the demo")
	}
	var errs []error
	for _, v := range d.Values() {
		field := name + "." + d.Name() + "." + v.Name
		switch v.Kind {
		case algo.Rate:
			if r := v.V.(float64); r > maxDemoRate {
				return badField(field, r, "at most %d per second in the demo", maxDemoRate)
			}
		case algo.Count:
			if n := v.V.(int); v.Name == "segments" && n > maxDemoSegments {
				return badField(field, n, "at most %d in the demo", maxDemoSegments)
			} else if v.Name != "segments" && n > maxDemoLimit {
				errs = append(errs, badField(field, n, "at most %d in the demo", maxDemoLimit))
			}
		case algo.Duration:
			if w := v.V.(time.Duration); w > maxDemoWindow {
				errs = append(errs, badField(field, policy.Duration(w), "at most %v in the demo", policy.Duration(maxDemoWindow)))
			}
		}
	}
	return errors.Join(errs...)
}

// windowOf is the window or refill period of cfg (its first duration), and
// whether it is a fixed window.
func windowOf(cfg ratelimit.Config) (time.Duration, bool) {
	d, err := algo.Of("demo", cfg)
	if err != nil {
		return 0, false
	}
	for _, v := range d.Values() {
		if v.Kind == algo.Duration {
			return v.V.(time.Duration), d.Name() == policy.FixedWindow
		}
	}
	return 0, false
}

// describe is a configuration in a few words, durations as the page
// writes them ("1m", not "1m0s").
func describe(cfg ratelimit.Config) string {
	if d, err := algo.Of("demo", cfg); err == nil {
		return d.Describe()
	}
	return fmt.Sprintf("%T", cfg)
}

// configOf is the configuration a spec runs: its own, or its stored
// policy's (nil when there is no such policy).
func (d *demo) configOf(sp spec) ratelimit.Config {
	if sp.cfg != nil {
		return sp.cfg
	}
	if p, ok := d.reg.Policy(sp.policy); ok {
		return p.Config
	}
	return nil
}

// makeSlot makes the limiter of a spec for session s.
func (d *demo) makeSlot(s *session, name string, sp spec) (*slot, error) {
	sl := &slot{spec: sp.canonical, label: sp.label}
	_, sl.holds = d.configOf(sp).(concurrency.Config)
	sl.window, sl.fixed = windowOf(d.configOf(sp))
	if sp.cfg == nil {
		pname, key := sp.policy, demoKey(sp.key)
		sl.acquire = func(ctx context.Context) (ratelimit.Lease, error) {
			return d.reg.Acquire(ctx, pname, key, demoApp, 1)
		}
		sl.close = func() error { return nil } // the registry owns the policy's limiters
		return sl, nil
	}
	var lim interface {
		ratelimit.Limiter
		Close() error
	}
	var err error
	if d.redis != nil {
		// limitkit:demo:{session:slot}: each limiter's keys in one slot.
		lim, err = redis.New(d.redis, s.id+":"+name, sp.cfg, redis.WithPrefix("limitkit:demo:"))
	} else {
		lim, err = memory.New(sp.cfg)
	}
	if err != nil {
		return nil, badField(name, "", "%v", err)
	}
	sl.acquire = func(ctx context.Context) (ratelimit.Lease, error) { return lim.Acquire(ctx, 1) }
	sl.close = lim.Close
	return sl, nil
}

// decision is the event of one limiter's answer to one request.
type decision struct {
	I          int      `json:"i"`    // the request's index in the run
	Slot       string   `json:"slot"` // "a" or "b"
	T          float64  `json:"t"`    // ms since the run's origin
	OK         bool     `json:"ok"`
	Reason     string   `json:"reason,omitempty"`
	RetryAfter *float64 `json:"retry_after_ms,omitempty"`
	Remaining  int64    `json:"remaining"`
	Limit      int64    `json:"limit"`
	Error      string   `json:"error,omitempty"`
}

// run serves POST /demo/run: it sends the traffic to the session's
// limiters (both on each request, side by side) and streams each decision
// as a Server-Sent Event ("start", then "decision"s, then "done").
func (d *demo) run(w http.ResponseWriter, r *http.Request) {
	req, err := decodeRun(r)
	if err != nil {
		d.fail(w, err)
		return
	}
	d.mu.Lock()
	s := d.sessions[req.Session]
	d.mu.Unlock()
	if s == nil {
		fail(w, http.StatusNotFound, "session", "", "no such demo session (it may have expired): create one with POST /demo/sessions")
		return
	}
	names := []string{"a"}
	raws := []json.RawMessage{req.A}
	if b := bytes.TrimSpace(req.B); len(b) > 0 && string(b) != "null" {
		names, raws = append(names, "b"), append(raws, req.B)
	}
	specs := make([]spec, len(raws))
	for i, raw := range raws {
		if specs[i], err = d.parseSpec(names[i], raw); err != nil {
			d.fail(w, err)
			return
		}
	}

	// The edge scenario needs a window: the fixed window's, else any.
	// A run refused for it changes none of the session's limiters.
	var window time.Duration
	if req.Traffic.Mode == "edge" {
		for _, sp := range specs {
			if w, fixed := windowOf(d.configOf(sp)); w > 0 && (window == 0 || fixed) {
				window = w
			}
		}
		if window == 0 {
			window = time.Second
		}
		if window > maxEdgeWindow {
			d.fail(w, badField("traffic.mode", "edge", "the window-edge scenario needs a window of at most %v, not %v", policy.Duration(maxEdgeWindow), policy.Duration(window)))
			return
		}
	}

	select {
	case d.runs <- struct{}{}:
		defer func() { <-d.runs }()
	default:
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusTooManyRequests, "", "", "too many demo runs at once; try again in a moment")
		return
	}
	slots, err := d.claim(s, names, specs)
	if err != nil {
		d.fail(w, err)
		return
	}
	defer func() {
		s.mu.Lock()
		s.running--
		s.lastUsed = time.Now()
		s.mu.Unlock()
	}()
	sched := schedule(req.Traffic, window, time.Now())

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	limiters := make([]map[string]string, len(slots))
	for i, sl := range slots {
		limiters[i] = map[string]string{"slot": names[i], "label": sl.label}
	}
	start := map[string]any{"limiters": limiters, "mode": req.Traffic.Mode, "requests": len(sched.at), "slice_ms": ms(sched.slice)}
	if sched.edge > 0 {
		start["edge_ms"] = ms(sched.edge)
	}
	writeEvent(w, "start", start)
	rc.Flush()

	allowed := map[string]int{}
	refused := map[string]int{}
	errored := map[string]int{}
	stopped := ""
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
loop:
	for i, at := range sched.at {
		if wait := time.Until(sched.origin.Add(at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				stopped = "the page closed the stream"
				break loop
			case <-d.stopped:
				stopped = "the server is shutting down"
				break loop
			}
		}
		for j, sl := range slots {
			ctx, cancel := context.WithTimeout(r.Context(), demoDecideTimeout)
			lease, err := sl.acquire(ctx)
			cancel()
			ev := decision{I: i, Slot: names[j], T: ms(time.Since(sched.origin))}
			switch {
			case err != nil:
				ev.Error = err.Error()
				errored[names[j]]++
			case lease.Acquired():
				ev.OK = true
				allowed[names[j]]++
				if sl.holds {
					time.AfterFunc(time.Duration(req.Traffic.Hold), lease.Release)
				}
			default:
				ev.Reason = lease.Reason().String()
				if ra, ok := lease.RetryAfter(); ok {
					v := ms(ra)
					ev.RetryAfter = &v
				}
				refused[names[j]]++
			}
			if err == nil {
				ev.Remaining, ev.Limit = lease.Remaining(), lease.Limit()
			}
			if writeEvent(w, "decision", ev) != nil {
				return // the page is gone
			}
		}
		if rc.Flush() != nil {
			return
		}
		select {
		case <-d.stopped:
			stopped = "the server is shutting down"
			break loop
		default:
		}
	}
	done := map[string]any{"allowed": allowed, "refused": refused, "errors": errored}
	if stopped != "" {
		done["stopped"] = stopped
	}
	writeEvent(w, "done", done)
	rc.Flush()
}

// claim puts the specs' limiters in the session's slots (keeping a slot
// whose spec is unchanged, with its state) and counts the run in.
func (d *demo) claim(s *session, names []string, specs []spec) ([]*slot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running >= maxSessionRuns {
		return nil, errTooManyRuns
	}
	changed := false
	for i, name := range names {
		if sl := s.slots[name]; sl == nil || sl.spec != specs[i].canonical {
			changed = true
		}
	}
	if changed && s.running > 0 {
		return nil, errBusy
	}
	// The new limiters are all made before any replaces the session's: a
	// run that fails changes none.
	out := make([]*slot, len(names))
	for i, name := range names {
		if sl := s.slots[name]; sl != nil && sl.spec == specs[i].canonical {
			out[i] = sl
			continue
		}
		sl, err := d.makeSlot(s, name, specs[i])
		if err != nil {
			for j := range i {
				if out[j] != s.slots[names[j]] {
					out[j].close()
				}
			}
			return nil, err
		}
		out[i] = sl
	}
	for i, name := range names {
		if old := s.slots[name]; old != nil && old != out[i] {
			old.close()
		}
		s.slots[name] = out[i]
	}
	if len(names) == 1 && s.slots["b"] != nil {
		s.slots["b"].close()
		delete(s.slots, "b")
	}
	s.running++
	s.lastUsed = time.Now()
	return out, nil
}

var (
	errTooManyRuns = errors.New("this session already has runs in progress; wait for one to finish")
	errBusy        = errors.New("a run with other limiters is in progress in this session; wait for it to finish")
)

func (d *demo) fail(w http.ResponseWriter, err error) {
	var fe *fieldError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		fail(w, http.StatusRequestEntityTooLarge, "", "", "request body over %d bytes", mb.Limit)
	case errors.As(err, &fe):
		fail(w, http.StatusBadRequest, fe.field, fe.value, "%s", err.Error())
	case errors.Is(err, errTooManyRuns), errors.Is(err, errBusy):
		fail(w, http.StatusConflict, "", "", "%v", err)
	default:
		fail(w, http.StatusInternalServerError, "", "", "%v", err)
	}
}

// plan is when a run's requests are sent, as offsets from origin, and how
// the page should slice time for its chart.
type plan struct {
	origin time.Time
	at     []time.Duration
	slice  time.Duration
	edge   time.Duration // edge scenario: the window edge, from origin
}

func schedule(t traffic, window time.Duration, now time.Time) plan {
	switch t.Mode {
	case "one":
		return plan{origin: now, at: []time.Duration{0}, slice: 100 * time.Millisecond}
	case "burst":
		return plan{origin: now, at: make([]time.Duration, t.N), slice: 100 * time.Millisecond}
	case "steady":
		n := int(math.Floor(t.Rate * t.Seconds))
		p := plan{origin: now, at: make([]time.Duration, n)}
		for i := range p.at {
			p.at[i] = time.Duration(float64(i) / t.Rate * float64(time.Second))
		}
		total := time.Duration(t.Seconds * float64(time.Second))
		p.slice = max(100*time.Millisecond, (total / 20).Round(50*time.Millisecond))
		return p
	}
	// edge: half the requests just before a window edge (aligned to the
	// Unix epoch, as every backend's windows are), half just after. The
	// edge is the end of a window that starts after now+delta, so that no
	// earlier request of the session counts in the window of the first
	// half (nor, for a sliding log, in the window before it).
	delta := min(window/10, 100*time.Millisecond)
	slice := 2 * delta
	edge := time.Unix(0, (now.Add(delta).UnixNano()/int64(window)+2)*int64(window))
	origin := edge.Add(-2 * slice)
	p := plan{origin: origin, slice: slice, edge: 2 * slice}
	for range t.N {
		p.at = append(p.at, 2*slice-delta)
	}
	for range t.N {
		p.at = append(p.at, 2*slice+delta)
	}
	return p
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func writeEvent(w io.Writer, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	return err
}

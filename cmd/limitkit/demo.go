package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
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

// makeSlot makes the limiter of a spec for session s.
func (d *demo) makeSlot(s *session, name string, sp spec) (*slot, error) {
	sl := &slot{spec: sp.canonical, label: sp.label}
	if desc, err := algo.Of("demo", d.configOf(sp)); err == nil {
		sl.holds = desc.Holds()
	}
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

package policy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/redis"
)

// DefaultMaxBodyBytes bounds a request body of the admin API when
// AdminOptions.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 64 << 10

// AdminOptions configures NewAdmin.
type AdminOptions struct {
	// Token is the bearer token of writers (who may read too). Required.
	Token string
	// ReadToken, if set, is a bearer token that may only read: list and get
	// policies, read a key's figures.
	ReadToken string
	// MaxBodyBytes bounds request bodies (413 beyond); DefaultMaxBodyBytes
	// when zero.
	MaxBodyBytes int64
	// Timeout bounds each request's calls to the store and the limiters;
	// 5s when zero.
	Timeout time.Duration
}

// NewAdmin returns the admin API of reg and its store, a JSON API over HTTP:
//
//	GET    /policies                          list (200: {"policies": [...]}, and "undecodable": [names] when stored policies do not decode)
//	GET    /policies/{name}                   one policy (200)
//	POST   /policies                          create (201; the body is a policy, without version)
//	PUT    /policies/{name}                   update (200; the body is the policy with the version it replaces)
//	DELETE /policies/{name}[?version=N]       delete (204; at version N when given)
//	GET    /policies/{name}/keys/{key}        a key's figures, taking nothing (200)
//	POST   /policies/{name}/keys/{key}/reset  reset a key (204)
//
// Every request needs "Authorization: Bearer <token>": Token for all, or
// ReadToken for the GETs. Tokens are compared in constant time (their
// SHA-256 digests, so that neither the content nor the length leaks);
// a missing or wrong token is a 401, a read token on a write a 403.
// The writer may name itself in an X-Actor header (recorded as
// created_by/updated_by; "admin" otherwise): it is trusted as the token is.
//
// A body is one policy in the package's JSON form (see the package doc);
// audit fields in it are ignored (the store sets them). Errors are JSON,
// {"error": "...", "field": "...", "value": "..."}: 400 for invalid input,
// naming the field and the value (malformed JSON, unknown fields, a key
// given twice, a value the algorithm refuses, numbers that do not fit, a
// missing or wrong version, a name other than the URL's), 404 for an
// unknown policy or endpoint, 409 for a version conflict or a name taken,
// 405 for another method or on a read-only store, 413 for a body over
// MaxBodyBytes (white space after the policy counts), 501 for a reset the backend cannot make, 503 when
// Redis cannot be reached. Nothing is written
// unless the whole request is valid, and each write is atomic in the store.
// After a write the registry reloads at once, so the process serving the
// API applies the change before it answers; the others learn of it through
// the store.
func NewAdmin(reg *Registry, opts AdminOptions) (http.Handler, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil registry", ErrInvalidPolicy)
	}
	if opts.Token == "" {
		return nil, fmt.Errorf("%w: the admin API needs a Token", ErrInvalidPolicy)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	a := &admin{reg: reg, opts: opts, write: sha256.Sum256([]byte(opts.Token))}
	if opts.ReadToken != "" {
		a.read = sha256.Sum256([]byte(opts.ReadToken))
		a.hasRead = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /policies", a.auth(false, a.list))
	mux.HandleFunc("GET /policies/{name}", a.auth(false, a.get))
	mux.HandleFunc("POST /policies", a.auth(true, a.create))
	mux.HandleFunc("PUT /policies/{name}", a.auth(true, a.update))
	mux.HandleFunc("DELETE /policies/{name}", a.auth(true, a.delete))
	mux.HandleFunc("GET /policies/{name}/keys/{key}", a.auth(false, a.figures))
	mux.HandleFunc("POST /policies/{name}/keys/{key}/reset", a.auth(true, a.reset))
	// Another method on these paths is a 405, another path a 404, in JSON
	// as every error (the mux's own answers are plain text).
	for path, allow := range map[string]string{
		"/policies":                         "GET, POST",
		"/policies/{name}":                  "GET, PUT, DELETE",
		"/policies/{name}/keys/{key}":       "GET",
		"/policies/{name}/keys/{key}/reset": "POST",
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			fail(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed here (allowed: "+allow+")", "", "")
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "no such endpoint", "", "")
	})
	return mux, nil
}

type admin struct {
	reg     *Registry
	opts    AdminOptions
	write   [sha256.Size]byte
	read    [sha256.Size]byte
	hasRead bool
}

type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Value string `json:"value,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, msg, field, value string) {
	writeJSON(w, status, apiError{Error: msg, Field: field, Value: value})
}

// auth checks the bearer token: a writer's token for writes, either token
// for reads.
func (a *admin) auth(write bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		const prefix = "Bearer "
		hdr := r.Header.Get("Authorization")
		if len(hdr) < len(prefix) || !strings.EqualFold(hdr[:len(prefix)], prefix) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="limitkit"`)
			fail(w, http.StatusUnauthorized, "missing bearer token", "", "")
			return
		}
		sum := sha256.Sum256([]byte(hdr[len(prefix):]))
		isWriter := subtle.ConstantTimeCompare(sum[:], a.write[:]) == 1
		isReader := a.hasRead && subtle.ConstantTimeCompare(sum[:], a.read[:]) == 1
		switch {
		case isWriter:
		case isReader && !write:
		case isReader:
			fail(w, http.StatusForbidden, "this token may only read", "", "")
			return
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="limitkit", error="invalid_token"`)
			fail(w, http.StatusUnauthorized, "invalid bearer token", "", "")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), a.opts.Timeout)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}

// fail writes err as its status and JSON body.
func (a *admin) error(w http.ResponseWriter, err error) {
	var fe *FieldError
	var mb *http.MaxBytesError
	var bad *UndecodableError
	switch {
	case errors.As(err, &bad): // the stored data, not the request
		fail(w, http.StatusInternalServerError, err.Error()+" (replace it with PUT at its version, or DELETE it)", "name", "")
	case errors.As(err, &mb):
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mb.Limit), "", "")
	case errors.As(err, &fe):
		fail(w, http.StatusBadRequest, err.Error(), fe.Field, fe.Value)
	case errors.Is(err, ErrInvalidKey):
		fail(w, http.StatusBadRequest, err.Error(), "key", "")
	case errors.Is(err, ErrInvalidPolicy):
		fail(w, http.StatusBadRequest, err.Error(), "", "")
	case errors.Is(err, ErrUnknownPolicy):
		fail(w, http.StatusNotFound, err.Error(), "name", "")
	case errors.Is(err, ErrConflict):
		fail(w, http.StatusConflict, err.Error(), "version", "")
	case errors.Is(err, ErrExists):
		fail(w, http.StatusConflict, err.Error(), "name", "")
	case errors.Is(err, ErrReadOnly):
		w.Header().Set("Allow", "GET")
		fail(w, http.StatusMethodNotAllowed, err.Error(), "", "")
	case errors.Is(err, errors.ErrUnsupported):
		fail(w, http.StatusNotImplemented, err.Error(), "", "")
	case errors.Is(err, redis.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		fail(w, http.StatusServiceUnavailable, err.Error(), "", "")
	default:
		fail(w, http.StatusInternalServerError, err.Error(), "", "")
	}
}

// writer returns who writes (actor), or ErrReadOnly when the store is a
// FileStore: a write to it is refused before its request is read, since
// nothing the request holds could change that answer.
func (a *admin) writer(r *http.Request) (string, error) {
	if _, ok := a.reg.Store().(*FileStore); ok {
		return "", errFileReadOnly
	}
	return actor(r)
}

func actor(r *http.Request) (string, error) {
	a := r.Header.Get("X-Actor")
	if a == "" {
		return "admin", nil
	}
	if err := checkText("X-Actor", a, MaxActorLen); err != nil {
		return "", err
	}
	return a, nil
}

func (a *admin) list(w http.ResponseWriter, r *http.Request) {
	ps, err := a.reg.Store().List(r.Context())
	var bad *UndecodableError
	if err != nil && !errors.As(err, &bad) {
		a.error(w, err)
		return
	}
	out := struct {
		Policies    []Policy `json:"policies"`
		Undecodable []string `json:"undecodable,omitempty"` // stored policies that do not decode: fix or delete them
	}{Policies: ps}
	if bad != nil {
		out.Undecodable = bad.Names
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *admin) get(w http.ResponseWriter, r *http.Request) {
	p, err := a.reg.Store().Get(r.Context(), r.PathValue("name"))
	if err != nil {
		a.error(w, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// body returns who writes (actor) and the request's policy, decoded within
// MaxBodyBytes.
func (a *admin) body(w http.ResponseWriter, r *http.Request) (string, Policy, error) {
	who, err := a.writer(r)
	if err != nil {
		return "", Policy{}, err
	}
	p, err := decodeRequest(http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes))
	return who, p, err
}

func (a *admin) afterWrite(ctx context.Context) {
	// The write stands; a reload that fails is retried at the next
	// notification, and reported.
	if err := a.reg.Reload(ctx); err != nil && !errors.Is(err, ratelimit.ErrClosed) {
		a.reg.report(err)
	}
}

func (a *admin) create(w http.ResponseWriter, r *http.Request) {
	who, p, err := a.body(w, r)
	if err != nil {
		a.error(w, err)
		return
	}
	if p.Version != 0 {
		a.error(w, fieldErr("version", p.Version, "must be absent when creating a policy"))
		return
	}
	p, err = a.reg.Store().Create(r.Context(), p, who)
	if err != nil {
		a.error(w, err)
		return
	}
	a.afterWrite(r.Context())
	w.Header().Set("Location", "/policies/"+p.Name)
	writeJSON(w, http.StatusCreated, p)
}

func (a *admin) update(w http.ResponseWriter, r *http.Request) {
	who, p, err := a.body(w, r)
	if err != nil {
		a.error(w, err)
		return
	}
	if name := r.PathValue("name"); p.Name != name {
		a.error(w, fieldErr("name", p.Name, "must be the policy's name in the URL, "+strconv.Quote(name)))
		return
	}
	if p.Version == 0 {
		a.error(w, fieldErr("version", 0, "is required: the version this update replaces"))
		return
	}
	p, err = a.reg.Store().Update(r.Context(), p, who)
	if err != nil {
		a.error(w, err)
		return
	}
	a.afterWrite(r.Context())
	writeJSON(w, http.StatusOK, p)
}

func (a *admin) delete(w http.ResponseWriter, r *http.Request) {
	who, err := a.writer(r)
	if err != nil {
		a.error(w, err)
		return
	}
	var version int64
	if v := r.URL.Query().Get("version"); v != "" {
		version, err = strconv.ParseInt(v, 10, 64)
		if err != nil || version <= 0 {
			a.error(w, fieldErr("version", v, "must be a positive integer"))
			return
		}
	}
	if err := a.reg.Store().Delete(r.Context(), r.PathValue("name"), version, who); err != nil {
		a.error(w, err)
		return
	}
	a.afterWrite(r.Context())
	w.WriteHeader(http.StatusNoContent)
}

// Figures is a key's state, as the admin API reports it.
type Figures struct {
	Policy    string `json:"policy"`
	Key       string `json:"key"`
	Available bool   `json:"available"` // at least one permit is available
	Remaining int64  `json:"remaining"`
	Limit     int64  `json:"limit"`
	// RetryAfter, when no permit is available, is how long until one is
	// (absent when unknown: a concurrency limit).
	RetryAfter *Duration `json:"retry_after,omitempty"`
	ResetAfter Duration  `json:"reset_after"` // until every permit is available
}

func (a *admin) figures(w http.ResponseWriter, r *http.Request) {
	name, key := r.PathValue("name"), r.PathValue("key")
	lease, err := a.reg.Peek(r.Context(), name, key)
	if err != nil {
		a.error(w, err)
		return
	}
	f := Figures{
		Policy: name, Key: key, Available: lease.Acquired(),
		Remaining: lease.Remaining(), Limit: lease.Limit(), ResetAfter: Duration(lease.ResetAfter()),
	}
	if d, ok := lease.RetryAfter(); ok {
		dd := Duration(d)
		f.RetryAfter = &dd
	}
	writeJSON(w, http.StatusOK, f)
}

func (a *admin) reset(w http.ResponseWriter, r *http.Request) {
	if err := a.reg.Reset(r.Context(), r.PathValue("name"), r.PathValue("key")); err != nil {
		a.error(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Store keeps policies. Every implementation of this package is safe for
// concurrent use, by goroutines and (RedisStore) by processes.
//
// Versions make concurrent edits safe: Create stores a policy at a version
// above every version its name ever had (a policy deleted and created again
// does not reuse a version), and Update and Delete apply only when the
// version they are given is the stored one, so of two edits made from the
// same read one succeeds and the other gets ErrConflict; edits of different
// policies never affect each other.
type Store interface {
	// List returns every policy, sorted by name: one consistent snapshot.
	// When some cannot be decoded, it returns the others (a non-nil slice)
	// and an *UndecodableError naming those; with any other error, or a
	// nil slice, a Registry keeps every policy as it is.
	List(ctx context.Context) ([]Policy, error)
	// Get returns the policy of that name, or ErrUnknownPolicy.
	Get(ctx context.Context, name string) (Policy, error)
	// Create validates p and stores it as a new policy, created and updated
	// by actor now; ErrExists when the name is taken. p's Version and audit
	// fields are ignored. It returns the policy as stored.
	Create(ctx context.Context, p Policy, actor string) (Policy, error)
	// Update validates p and replaces the policy p.Name, whose stored
	// version must be p.Version (ErrConflict otherwise; ErrUnknownPolicy
	// when there is none), updated by actor now, at the next version. The
	// creation fields are kept. It returns the policy as stored.
	Update(ctx context.Context, p Policy, actor string) (Policy, error)
	// Delete removes the policy name; when version is not 0 it must be the
	// stored one (ErrConflict otherwise). ErrUnknownPolicy when there is
	// none.
	Delete(ctx context.Context, name string, version int64, actor string) error
	// Watch calls changed whenever the policies may have changed (the
	// caller then reads them with List), from one goroutine at a time, until
	// stop is called; stop waits for a call in progress to return. A
	// watcher may also call it when nothing changed (after a reconnection,
	// or at a safety-net interval).
	Watch(changed func()) (stop func())
}

// now is the audit clock: wall time, truncated to milliseconds so that what
// is stored reads back equal.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func checkActor(actor string) error {
	return checkText("actor", actor, MaxActorLen)
}

// toWrite checks a write of p by actor (the actor, then p) and returns the
// copy of p to store.
func toWrite(p Policy, actor string) (Policy, error) {
	p = clonePolicy(p)
	if err := checkActor(actor); err != nil {
		return Policy{}, err
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// toCreate is toWrite for a new policy, stamped as created and updated by
// actor now, at version 0 until it is stored.
func toCreate(p Policy, actor string) (Policy, error) {
	t := now()
	p.CreatedBy, p.CreatedAt, p.UpdatedBy, p.UpdatedAt, p.Version = actor, t, actor, t, 0
	return toWrite(p, actor)
}

// MemoryStore is a Store in the process's memory: for a single process,
// and for tests. Its zero value is not usable: call NewMemoryStore.
type MemoryStore struct {
	mu       sync.Mutex
	policies map[string]Policy
	versions map[string]int64 // the last version of every name ever stored
	watchers map[int]chan struct{}
	next     int
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{policies: map[string]Policy{}, versions: map[string]int64{}, watchers: map[int]chan struct{}{}}
}

// List returns the policies, sorted by name.
func (s *MemoryStore) List(ctx context.Context) ([]Policy, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Policy, 0, len(s.policies))
	for _, p := range s.policies {
		out = append(out, clonePolicy(p))
	}
	sortPolicies(out)
	return out, nil
}

// Get returns the policy name.
func (s *MemoryStore) Get(ctx context.Context, name string) (Policy, error) {
	if err := ctx.Err(); err != nil {
		return Policy{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.policies[name]
	if !ok {
		return Policy{}, fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
	}
	return clonePolicy(p), nil
}

// Create stores a new policy.
func (s *MemoryStore) Create(ctx context.Context, p Policy, actor string) (Policy, error) {
	if err := ctx.Err(); err != nil {
		return Policy{}, err
	}
	p, err := toCreate(p, actor)
	if err != nil {
		return Policy{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.policies[p.Name]; ok {
		return Policy{}, fmt.Errorf("%w: %q", ErrExists, p.Name)
	}
	return s.putLocked(p), nil
}

// Update replaces a policy at its stored version.
func (s *MemoryStore) Update(ctx context.Context, p Policy, actor string) (Policy, error) {
	if err := ctx.Err(); err != nil {
		return Policy{}, err
	}
	p, err := toWrite(p, actor)
	if err != nil {
		return Policy{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.policies[p.Name]
	if !ok {
		return Policy{}, fmt.Errorf("%w: %q", ErrUnknownPolicy, p.Name)
	}
	if cur.Version != p.Version {
		return Policy{}, conflict(p.Name, p.Version, cur.Version)
	}
	p.CreatedBy, p.CreatedAt = cur.CreatedBy, cur.CreatedAt
	p.UpdatedBy, p.UpdatedAt = actor, now()
	return s.putLocked(p), nil
}

// putLocked stores p at the next version of its name, tells the watchers,
// and returns a copy of what it stored. s.mu is held.
func (s *MemoryStore) putLocked(p Policy) Policy {
	p.Version = s.versions[p.Name] + 1
	s.versions[p.Name] = p.Version
	s.policies[p.Name] = p
	s.notifyLocked()
	return clonePolicy(p)
}

// Delete removes a policy.
func (s *MemoryStore) Delete(ctx context.Context, name string, version int64, actor string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.policies[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
	}
	if version != 0 && cur.Version != version {
		return conflict(name, version, cur.Version)
	}
	delete(s.policies, name)
	s.versions[name]++
	s.notifyLocked()
	return nil
}

// Watch calls changed after every change made through this store.
func (s *MemoryStore) Watch(changed func()) (stop func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	id := s.next
	s.next++
	s.watchers[id] = ch
	s.mu.Unlock()
	return runWatcher(ch, changed, func() {
		s.mu.Lock()
		delete(s.watchers, id)
		s.mu.Unlock()
	})
}

func (s *MemoryStore) notifyLocked() {
	for _, ch := range s.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// runWatcher calls changed once for each signal on ch (signals that arrive
// while a call runs are merged into one more call) until stop is called.
func runWatcher(ch <-chan struct{}, changed func(), cleanup func()) (stop func()) {
	return goUntilStopped(func(done <-chan struct{}) {
		for {
			select {
			case <-done:
				return
			case <-ch:
				changed()
			}
		}
	}, cleanup)
}

// goUntilStopped runs loop in a goroutine until it returns, which it must
// when done is closed. stop closes done, waits for loop to return, then
// calls cleanup (if not nil); calls after the first do nothing.
func goUntilStopped(loop func(done <-chan struct{}), cleanup func()) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		loop(done)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-exited
			if cleanup != nil {
				cleanup()
			}
		})
	}
}

func conflict(name string, have, stored int64) error {
	return fmt.Errorf("%w: policy %q is at version %d, not %d: read it again", ErrConflict, name, stored, have)
}

func clonePolicy(p Policy) Policy {
	p.Apps = slices.Clone(p.Apps)
	return p
}

func sortPolicies(ps []Policy) {
	slices.SortFunc(ps, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
}

package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/limitkit/ratelimit/internal/strictjson"
)

// FileOptions configures NewFileStore. The zero value is the defaults.
type FileOptions struct {
	// Interval is how often Watch reads the file again; zero means one
	// second.
	Interval time.Duration
	// OnError, if set, receives the errors of reading the file again (it is
	// missing, or holds invalid JSON or an invalid policy): the store then
	// keeps the policies it last read.
	OnError func(error)
}

// FileStore is a read-only Store of policies kept in a JSON file, for teams
// that keep their configuration in git and deploy it as a file:
//
//	{"policies": [
//	  {"name": "login", "algorithm": "tokenbucket", "tokenbucket": {"rate": 5, "burst": 10},
//	   "key": "ip", "apps": ["web"]}
//	]}
//
// Each policy is in the package's JSON form; version and audit fields are
// optional (git holds the history), and a version, when given, is
// reported as it is. Create, Update and Delete return ErrReadOnly.
//
// Watch reads the file every Interval and compares its SHA-256 with the last
// one read (a poll, without a file-notification dependency: an edit, a
// rename over it or a checkout are all seen, within Interval). A file that no
// longer reads or validates is reported to OnError and changes nothing: the
// store keeps serving the last valid set, all or nothing.
type FileStore struct {
	path string
	opts FileOptions

	mu       sync.Mutex
	sum      [sha256.Size]byte
	policies []Policy
}

// NewFileStore reads and validates the file at path.
func NewFileStore(path string, opts FileOptions) (*FileStore, error) {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	s := &FileStore{path: path, opts: opts}
	if _, err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// ParseFile decodes a policy file's content (see FileStore): every policy
// valid, names unique.
func ParseFile(data []byte) ([]Policy, error) {
	var doc struct {
		Policies []json.RawMessage `json:"policies"`
	}
	if err := strictjson.Unmarshal(data, &doc); err != nil {
		return nil, decodeErr(err, "", "a policy file")
	}
	out := make([]Policy, 0, len(doc.Policies))
	seen := map[string]bool{}
	for i, raw := range doc.Policies {
		p, err := Decode(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("policies[%d]: %w", i, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("policies[%d]: %w", i, fieldErr("name", p.Name, "is defined twice"))
		}
		seen[p.Name] = true
		out = append(out, p)
	}
	sortPolicies(out)
	return out, nil
}

// reload reads the file; changed reports a content different from the last
// one read.
func (s *FileStore) reload() (changed bool, err error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return false, fmt.Errorf("policy: reading %s: %w", s.path, err)
	}
	sum := sha256.Sum256(data)
	s.mu.Lock()
	same := sum == s.sum && s.policies != nil
	s.mu.Unlock()
	if same {
		return false, nil
	}
	ps, err := ParseFile(data)
	if err != nil {
		return false, fmt.Errorf("policy: %s: %w", s.path, err)
	}
	s.mu.Lock()
	s.sum, s.policies = sum, ps
	s.mu.Unlock()
	return true, nil
}

// List returns the policies last read.
func (s *FileStore) List(ctx context.Context) ([]Policy, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Policy, len(s.policies))
	for i, p := range s.policies {
		out[i] = clonePolicy(p)
	}
	return out, nil
}

// Get returns one of the policies last read.
func (s *FileStore) Get(ctx context.Context, name string) (Policy, error) {
	ps, err := s.List(ctx)
	if err != nil {
		return Policy{}, err
	}
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return Policy{}, fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
}

var errFileReadOnly = fmt.Errorf("%w: policies are edited in the file", ErrReadOnly)

// Create returns ErrReadOnly.
func (s *FileStore) Create(context.Context, Policy, string) (Policy, error) {
	return Policy{}, errFileReadOnly
}

// Update returns ErrReadOnly.
func (s *FileStore) Update(context.Context, Policy, string) (Policy, error) {
	return Policy{}, errFileReadOnly
}

// Delete returns ErrReadOnly.
func (s *FileStore) Delete(context.Context, string, int64, string) error {
	return errFileReadOnly
}

// Watch polls the file every Interval and calls changed when its content
// changed and is valid.
func (s *FileStore) Watch(changed func()) (stop func()) {
	s.mu.Lock()
	last := s.sum // what this watcher's caller has seen
	s.mu.Unlock()
	return goUntilStopped(func(done <-chan struct{}) {
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if _, err := s.reload(); err != nil && s.opts.OnError != nil {
				s.opts.OnError(err)
			}
			s.mu.Lock()
			sum := s.sum
			s.mu.Unlock()
			if sum != last {
				last = sum
				changed()
			}
		}
	}, nil)
}

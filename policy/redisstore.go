package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisOptions configures NewRedisStore. The zero value is the defaults.
type RedisOptions struct {
	// Prefix starts the store's keys and channel; "limitkit:policy:" when
	// empty. It must not hold '{' or '}' (the keys share one hash tag, so
	// one Cluster slot).
	Prefix string
	// ReloadInterval is the safety net of Watch: the policies are read again
	// at this interval even when no notification came. Zero means 30s; a
	// negative value turns it off.
	ReloadInterval time.Duration
	// OnError, if set, receives the errors of Watch's subscription (a lost
	// connection, which it retries with backoff).
	OnError func(error)
}

// RedisStore is a Store in Redis, shared by every process of a fleet.
//
// The policies are two hashes under one hash tag: prefix+"{store}:defs"
// (name → the policy's JSON without its version) and
// prefix+"{store}:versions" (name → version; kept after a delete, so that a
// name never reuses a version). Every write is one Lua script that checks the
// version, writes both hashes and publishes "name version" on the channel
// prefix+"changes", atomically: nothing is ever half-written, and of two
// concurrent edits of one policy from the same version the second gets
// ErrConflict.
//
// Watch subscribes to the channel and calls its function on every
// notification, on every (re)subscription (go-redis subscribes again after a
// reconnection: the policies are then read again, so a change made while
// the connection was down is not missed) and every ReloadInterval. A change
// reaches every watching process in about one round trip after the write.
type RedisStore struct {
	client   goredis.UniversalClient
	defs     string
	versions string
	channel  string
	opts     RedisOptions
}

// NewRedisStore returns a store on client. It sends nothing to Redis.
func NewRedisStore(client goredis.UniversalClient, opts RedisOptions) (*RedisStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidPolicy)
	}
	if opts.Prefix == "" {
		opts.Prefix = "limitkit:policy:"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("%w: Redis prefix %q must not hold '{' or '}'", ErrInvalidPolicy, opts.Prefix)
	}
	if opts.ReloadInterval == 0 {
		opts.ReloadInterval = 30 * time.Second
	}
	return &RedisStore{
		client:   client,
		defs:     opts.Prefix + "{store}:defs",
		versions: opts.Prefix + "{store}:versions",
		channel:  opts.Prefix + "changes",
		opts:     opts,
	}, nil
}

// Channel is the pub/sub channel the store publishes its changes on.
func (s *RedisStore) Channel() string { return s.channel }

// writeScript makes one write: mode "create", "update" or "delete".
// Replies {0, new version}, or {code, stored version} with code -1 (exists),
// -2 (unknown), -3 (version conflict).
var writeScript = goredis.NewScript(`
local name, mode, expected = ARGV[1], ARGV[2], tonumber(ARGV[3])
local exists = redis.call('HEXISTS', KEYS[1], name) == 1
local cur = tonumber(redis.call('HGET', KEYS[2], name) or '0')
if mode == 'create' then
  if exists then return {-1, cur} end
else
  if not exists then return {-2, cur} end
  if (mode == 'update' or expected ~= 0) and expected ~= cur then return {-3, cur} end
end
local v = cur + 1
redis.call('HSET', KEYS[2], name, v)
if mode == 'delete' then
  redis.call('HDEL', KEYS[1], name)
else
  redis.call('HSET', KEYS[1], name, ARGV[4])
end
redis.call('PUBLISH', ARGV[5], name .. ' ' .. v)
return {0, v}
`)

func (s *RedisStore) write(ctx context.Context, mode, name string, expected int64, body []byte) (int64, error) {
	res, err := writeScript.Run(ctx, s.client, []string{s.defs, s.versions},
		name, mode, expected, body, s.channel).Int64Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("policy: unexpected reply from Redis: %v", res)
	}
	switch res[0] {
	case 0:
		return res[1], nil
	case -1:
		return 0, fmt.Errorf("%w: %q", ErrExists, name)
	case -2:
		return 0, fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
	case -3:
		return 0, conflict(name, expected, res[1])
	}
	return 0, fmt.Errorf("policy: unexpected reply from Redis: %v", res)
}

func encodeStored(p Policy) ([]byte, error) {
	p.Version = 0 // the versions hash holds it
	return json.Marshal(p)
}

// decodeStored decodes the policy name stored as body at version. When it
// cannot, it returns the name and the version (0 when that does not
// parse either) with the error: enough to replace or delete it.
func decodeStored(name string, body, version string) (Policy, error) {
	v, verr := strconv.ParseInt(version, 10, 64)
	p, err := Decode(bytes.NewReader([]byte(body)))
	switch {
	case err != nil:
		err = fmt.Errorf("policy: stored policy %q is invalid: %w", name, err)
	case p.Name != name:
		err = fmt.Errorf("%w: stored policy %q is named %q", ErrInvalidPolicy, name, p.Name)
	case verr != nil:
		err = fmt.Errorf("%w: stored policy %q has version %q", ErrInvalidPolicy, name, version)
	}
	if err != nil {
		return Policy{Name: name, Version: v}, err
	}
	p.Version = v
	return p, nil
}

// List reads every policy in one transaction.
func (s *RedisStore) List(ctx context.Context) ([]Policy, error) {
	var defs, vers *goredis.MapStringStringCmd
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		defs = p.HGetAll(ctx, s.defs)
		vers = p.HGetAll(ctx, s.versions)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Policy, 0, len(defs.Val()))
	var bad []string
	var errs []error
	for name, body := range defs.Val() {
		p, err := decodeStored(name, body, vers.Val()[name])
		if err != nil {
			bad, errs = append(bad, name), append(errs, err)
			continue
		}
		out = append(out, p)
	}
	sortPolicies(out)
	if len(bad) > 0 {
		slices.Sort(bad)
		return out, &UndecodableError{Names: bad, Err: errors.Join(errs...)}
	}
	return out, nil
}

// Get reads one policy.
func (s *RedisStore) Get(ctx context.Context, name string) (Policy, error) {
	var def, ver *goredis.StringCmd
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		def = p.HGet(ctx, s.defs, name)
		ver = p.HGet(ctx, s.versions, name)
		return nil
	})
	if errors.Is(def.Err(), goredis.Nil) {
		return Policy{}, fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
	}
	if err != nil && !errors.Is(err, goredis.Nil) {
		return Policy{}, err
	}
	p, err := decodeStored(name, def.Val(), ver.Val())
	if err != nil {
		return Policy{}, &UndecodableError{Names: []string{name}, Err: err}
	}
	return p, nil
}

// Create stores a new policy; its version is one more than any its name had.
func (s *RedisStore) Create(ctx context.Context, p Policy, actor string) (Policy, error) {
	p, err := toCreate(p, actor)
	if err != nil {
		return Policy{}, err
	}
	body, err := encodeStored(p)
	if err != nil {
		return Policy{}, err
	}
	if p.Version, err = s.write(ctx, "create", p.Name, 0, body); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Update replaces a policy if p.Version is the stored version. The stored
// policy is read first for its creation fields (which never change while
// the version does not). A stored policy that does not decode is replaced
// too (its version is still checked), created anew by actor: its creation
// fields are lost with its body.
func (s *RedisStore) Update(ctx context.Context, p Policy, actor string) (Policy, error) {
	p, err := toWrite(p, actor)
	if err != nil {
		return Policy{}, err
	}
	t := now()
	cur, err := s.Get(ctx, p.Name)
	var bad *UndecodableError
	switch {
	case errors.As(err, &bad):
		cur = Policy{Version: p.Version, CreatedBy: actor, CreatedAt: t} // the write checks the stored version
	case err != nil:
		return Policy{}, err
	case cur.Version != p.Version:
		return Policy{}, conflict(p.Name, p.Version, cur.Version)
	}
	p.CreatedBy, p.CreatedAt = cur.CreatedBy, cur.CreatedAt
	p.UpdatedBy, p.UpdatedAt = actor, t
	body, err := encodeStored(p)
	if err != nil {
		return Policy{}, err
	}
	if p.Version, err = s.write(ctx, "update", p.Name, p.Version, body); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Delete removes a policy (at version, unless 0).
func (s *RedisStore) Delete(ctx context.Context, name string, version int64, actor string) error {
	_, err := s.write(ctx, "delete", name, version, nil)
	return err
}

// Watch subscribes to the store's channel; see RedisStore.
func (s *RedisStore) Watch(changed func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	signal := make(chan struct{}, 1)
	notify := func() {
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	ps := s.client.Subscribe(ctx, s.channel)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		backoff := 10 * time.Millisecond
		for {
			msg, err := ps.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if s.opts.OnError != nil {
					s.opts.OnError(fmt.Errorf("policy: watching %s: %w", s.channel, err))
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			switch msg.(type) {
			case *goredis.Subscription, *goredis.Message:
				notify()
			}
		}
	}()
	if s.opts.ReloadInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(s.opts.ReloadInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					notify()
				}
			}
		}()
	}
	stopWatcher := runWatcher(signal, changed, nil)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			ps.Close()
			wg.Wait()
			stopWatcher()
		})
	}
}

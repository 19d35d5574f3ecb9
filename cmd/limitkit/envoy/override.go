package envoy

import (
	"context"
	"fmt"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/policy"
)

// overrideLimit is the fixed window of a request's limit override: one per
// unit and requests per unit, keyed by domain and entries.
type overrideLimit struct {
	rpu   uint32
	unit  rlspb.RateLimitResponse_RateLimit_Unit
	cfg   fixedwindow.Config
	name  string
	reg   *policy.Registry // nil for 0 requests per unit
	keyed ratelimit.Keyed
}

func (o *overrideLimit) close() error {
	if o.reg == nil {
		return nil
	}
	return o.reg.Close()
}

// override returns the limit of a request's override, made on first use.
func (s *Service) override(l *rlcommon.RateLimitDescriptor_RateLimitOverride) (*overrideLimit, error) {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(l.GetUnit())
	if unitLength(unit) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "limit override: unit %v is not a unit of time", l.GetUnit())
	}
	k := [2]uint32{l.GetRequestsPerUnit(), uint32(unit)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, status.Error(codes.Unavailable, "the service is closed")
	}
	if o := s.overrides[k]; o != nil {
		return o, nil
	}
	if len(s.overrides) >= s.opts.MaxOverrides {
		return nil, status.Errorf(codes.ResourceExhausted, "limit override: more than %d distinct overrides", s.opts.MaxOverrides)
	}
	o := &overrideLimit{rpu: k[0], unit: unit, cfg: fixedwindow.Config{Limit: int(k[0]), Window: unitLength(unit)},
		name: fmt.Sprintf("envoy-override.%d-per-%s", k[0], unit)}
	if o.rpu > 0 {
		store := policy.NewMemoryStore()
		ctx := context.Background()
		if _, err := store.Create(ctx, policy.Policy{Name: o.name, Config: counting(o.cfg), Key: KeyKind, Apps: []string{App}}, App); err != nil {
			return nil, status.Errorf(codes.Internal, "limit override: %v", err)
		}
		reg, err := policy.NewRegistry(ctx, store, policy.Options{Backend: s.opts.Backend})
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "limit override: %v", err)
		}
		if _, ok := reg.Policy(o.name); !ok {
			reg.Close()
			return nil, status.Errorf(codes.Unavailable, "limit override: the limiters of %s could not be made", o.name)
		}
		o.reg, o.keyed = reg, reg.Keyed(o.name, App)
	}
	s.overrides[k] = o
	return o, nil
}

// overrideKey is an override's counter key: the domain and the entries.
func overrideKey(domain string, es []*rlcommon.RateLimitDescriptor_Entry) string {
	return counterKey(append([]Entry{{Key: "domain", Value: domain}}, entries(es)...), nil, nil)
}

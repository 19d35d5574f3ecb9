package hotkey

import (
	"fmt"
	"slices"
	"time"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/fixedwindow"
	"github.com/limitkit/ratelimit/slidinglog"
	"github.com/limitkit/ratelimit/tokenbucket"
)

// A spend is a grant of permits whose instant is known to lie in
// [from, to] (ns since the Unix epoch): on a fake clock from == to; on the
// real clock, the readings before and after the call.
type spend struct {
	from, to int64
	permits  int64
}

// overAdmission checks spends (of one key) against cfg's bound and
// returns the first excess found, nil when there is none. A window or a
// span counts the spends whose interval lies wholly inside it, which is
// sound whatever the instant within the interval.
//
//   - Fixed window: at most Limit in every window aligned to the epoch.
//   - Sliding log: at most Limit in every span shorter than Window.
//   - Token bucket: at most Burst + Rate x d in every span of length d
//     (interval refill: Burst + PerPeriod x the refill instants in it).
func overAdmission(cfg ratelimit.Config, spends []spend) error {
	s := slices.Clone(spends)
	slices.SortFunc(s, func(a, b spend) int { return int(a.from - b.from) })
	switch c := cfg.(type) {
	case fixedwindow.Config:
		w := int64(c.Window)
		sums := map[int64]int64{}
		for _, x := range s {
			if x.from/w == x.to/w {
				sums[x.from/w] += x.permits
			}
		}
		for win, n := range sums {
			if n > int64(c.Limit) {
				return fmt.Errorf("%d permits in the window at %v, limit %d", n, time.Unix(0, win*w).UTC(), c.Limit)
			}
		}
	case slidinglog.Config:
		// For each spend i, those that start at or after it and end less
		// than Window after its start.
		w := int64(c.Window)
		for i := range s {
			var n int64
			for _, x := range s[i:] {
				if x.from-s[i].from >= w {
					break
				}
				if x.to-s[i].from < w {
					n += x.permits
				}
			}
			if n > int64(c.Limit) {
				return fmt.Errorf("%d permits within %v from %v, limit %d", n, c.Window, time.Unix(0, s[i].from).UTC(), c.Limit)
			}
		}
	case tokenbucket.Config:
		// The spends i..j, in order of their ends, lie in [from_i, to_j]
		// when every one of them starts at or after from_i: checked from
		// each start, over the spends that start after it.
		gain := func(a, b int64) float64 { // refill in [a, b]
			if c.Period > 0 {
				p := int64(c.Period)
				return float64(int64(c.PerPeriod) * (b/p - (a-1)/p)) // the multiples of p in [a, b], a > 0
			}
			return float64(c.Rate) * float64(b-a+1) / 1e9
		}
		byTo := slices.Clone(s)
		slices.SortFunc(byTo, func(a, b spend) int { return int(a.to - b.to) })
		stride := max(1, len(s)/1000)
		for i := 0; i < len(s); i += stride {
			a, n := s[i].from, int64(0)
			for _, x := range byTo {
				if x.from < a {
					continue
				}
				n += x.permits
				if bound := float64(c.Burst) + gain(a, x.to); float64(n) > bound+1e-6 {
					return fmt.Errorf("%d permits within %v from %v, bound %.1f", n, time.Duration(x.to-a), time.Unix(0, a).UTC(), bound)
				}
			}
		}
	default:
		return fmt.Errorf("no bound for %T", cfg)
	}
	return nil
}

package envoy

import (
	"sync"
	"time"
)

// overCache is the local over-limit cache (Options.LocalCacheSize): the
// counters of fixed windows known to be past their limit, with the end of
// that window, so that the calls on them are answered without asking the
// backend until it ends. It is emptied when the configuration changes (a
// limit may have been raised). Safe for concurrent use.
type overCache struct {
	mu   sync.Mutex
	size int
	cfg  *Config          // the configuration its entries were learnt under
	ends map[string]int64 // counter -> its window's end, Unix nanoseconds
}

func newOverCache(size int) *overCache {
	return &overCache{size: size, ends: map[string]int64{}}
}

// over reports whether counter is known to be past its limit at now,
// under cfg.
func (c *overCache) over(cfg *Config, counter string, now time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.follow(cfg)
	end, ok := c.ends[counter]
	if ok && end <= now.UnixNano() {
		delete(c.ends, counter)
		return false
	}
	return ok
}

// add records that counter is past its limit until end. When the cache is
// full, the entries whose window ended go first, then any one.
func (c *overCache) add(cfg *Config, counter string, end, now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.follow(cfg)
	if _, ok := c.ends[counter]; !ok && len(c.ends) >= c.size {
		for k, e := range c.ends {
			if e <= now.UnixNano() {
				delete(c.ends, k)
			}
		}
		for k := range c.ends {
			if len(c.ends) < c.size {
				break
			}
			delete(c.ends, k)
		}
	}
	c.ends[counter] = end.UnixNano()
}

// follow empties the cache when cfg is not the configuration its entries
// were learnt under. Requires c.mu.
func (c *overCache) follow(cfg *Config) {
	if c.cfg != cfg {
		c.cfg = cfg
		clear(c.ends)
	}
}

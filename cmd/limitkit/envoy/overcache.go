package envoy

import (
	"container/list"
	"sync"
	"time"
)

// overCache is the local over-limit cache (Options.LocalCacheSize): the
// counters of fixed windows known to be past their limit, with the end of
// that window, so that the calls on them are answered without asking the
// backend until it ends. When it is full, a counter whose window has ended
// goes, among the expireLook learnt first, or else the counter learnt
// first. It is emptied when the configuration changes (a limit may have
// been raised). Safe for concurrent use.
type overCache struct {
	mu    sync.Mutex
	size  int
	cfg   *Config                  // the configuration its entries were learnt under
	ends  map[string]*list.Element // counter -> its entry in order
	order list.List                // of *overEntry, the first learnt first
}

type overEntry struct {
	counter string
	end     int64 // the counter's window's end, Unix nanoseconds
}

func newOverCache(size int) *overCache {
	return &overCache{size: size, ends: map[string]*list.Element{}}
}

// over reports whether counter is known to be past its limit at now,
// under cfg.
func (c *overCache) over(cfg *Config, counter string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.follow(cfg)
	e, ok := c.ends[counter]
	if ok && e.Value.(*overEntry).end <= now.UnixNano() {
		c.remove(e)
		return false
	}
	return ok
}

// expireLook bounds the counters a full cache looks at for one whose
// window has ended, from the one learnt first.
const expireLook = 8

// add records at now that counter is past its limit until end.
func (c *overCache) add(cfg *Config, counter string, now, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.follow(cfg)
	if e, ok := c.ends[counter]; ok {
		e.Value.(*overEntry).end = end.UnixNano()
		c.order.MoveToBack(e)
		return
	}
	if len(c.ends) >= c.size {
		gone := c.order.Front()
		for e, i := gone, 0; e != nil && i < expireLook; e, i = e.Next(), i+1 {
			if e.Value.(*overEntry).end <= now.UnixNano() {
				gone = e
				break
			}
		}
		c.remove(gone)
	}
	c.ends[counter] = c.order.PushBack(&overEntry{counter, end.UnixNano()})
}

// remove forgets e's counter. Requires c.mu.
func (c *overCache) remove(e *list.Element) {
	delete(c.ends, e.Value.(*overEntry).counter)
	c.order.Remove(e)
}

// follow empties the cache when cfg is not the configuration its entries
// were learnt under. Requires c.mu.
func (c *overCache) follow(cfg *Config) {
	if c.cfg != cfg {
		c.cfg = cfg
		clear(c.ends)
		c.order.Init()
	}
}

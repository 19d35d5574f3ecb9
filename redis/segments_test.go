package redis

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/internal/redistest"
	"github.com/limitkit/ratelimit/ratelimittest"
	"github.com/limitkit/ratelimit/slidingwindow"
)

// segmentedWorstCase measures, on c, the segmented sliding window's
// costliest calls at n segments, every segment holding a grant (n
// entries): a refusal whose RetryAfter is the newest segment's, a window
// advance that drops all segments but the newest, and an advance by half
// the window followed by a refusal that needs the rest. It returns the
// slowest of them as SLOWLOG records it (the server logs every command).
func segmentedWorstCase(t testing.TB, c *goredis.Client, n int) time.Duration {
	ctx := context.Background()
	seg := time.Millisecond
	clock := ratelimittest.NewClock()
	cfg := slidingwindow.Config{Limit: n, Window: time.Duration(n) * seg, Segments: n}
	var worst time.Duration
	for _, tc := range []struct {
		name             string
		advance, permits int
	}{{"walk", 0, n}, {"drop", n - 1, n}, {"both", n / 2, n}} {
		key := fmt.Sprintf("worst-%d-%s", n, tc.name)
		l, err := New(c, key, cfg, WithClock(clock), WithoutRefusalCache(), WithoutCoalescing())
		if err != nil {
			t.Fatal(err)
		}
		l.Acquire(ctx, 0) // loads the script
		// One permit in each of the n segments that end now.
		start := clock.Now().UnixMicro()
		segUs := int64(seg / time.Microsecond)
		entries := make([]interface{}, n)
		for i := 0; i < n; i++ {
			entries[i] = fmt.Sprintf("%d %d", start-int64(n-1-i)*segUs, i+1)
		}
		c.Del(ctx, l.keys...)
		// keys[0] is the weighted form's state; keys[1] and keys[2] the log.
		if err := c.RPush(ctx, l.keys[1], entries...).Err(); err != nil {
			t.Fatal(err)
		}
		c.Set(ctx, l.keys[2], fmt.Sprintf("0 %d", start), 0)
		c.SlowLogReset(ctx)
		r, err := l.call(ctx, clock.Now().Add(time.Duration(tc.advance)*seg), opAcquire, int64(tc.permits))
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.granted {
			t.Fatalf("%s: granted", tc.name)
		}
		log, err := c.SlowLogGet(ctx, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range log {
			if len(e.Args) > 0 && e.Args[0] == "evalsha" {
				worst = max(worst, e.Duration)
			}
		}
	}
	return worst
}

// TestSegmentedWorstCase logs the slowest segmented call at MaxSegments
// and, with RATELIMIT_MEASURE_SEGMENTS=1, at every power of two from 256
// to 65536 (the worst of 5 runs, on a machine that may be busy).
func TestSegmentedWorstCase(t *testing.T) {
	srv := redistest.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1024")
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	defer c.Close()
	sizes := []int{slidingwindow.MaxSegments}
	if os.Getenv("RATELIMIT_MEASURE_SEGMENTS") == "1" {
		sizes = nil
		for n := 256; n <= 1<<16; n *= 2 {
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		var worst time.Duration
		for rep := 0; rep < 5; rep++ {
			worst = max(worst, segmentedWorstCase(t, c, n))
		}
		t.Logf("Segments %6d: slowest call %v", n, worst)
	}
}

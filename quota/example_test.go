package quota_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/quota"
	"github.com/limitkit/ratelimit/ratelimittest"
)

// A quota of 2 a day in Paris, on the day its clocks skip an hour: the
// day is 23 hours long, and the quota comes back at the next local
// midnight.
func Example() {
	paris, _ := time.LoadLocation("Europe/Paris")
	clock := ratelimittest.NewClockAt(time.Date(2034, time.March, 26, 9, 0, 0, 0, paris))
	l, err := memory.New(quota.Config{Limit: 2, Period: quota.Day, Timezone: "Europe/Paris"}, memory.WithClock(clock))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	ctx := context.Background()
	for range 3 {
		lease, _ := l.Acquire(ctx, 1)
		retry, _ := lease.RetryAfter()
		fmt.Println(lease.Acquired(), lease.Remaining(), retry)
	}
	clock.Advance(15 * time.Hour)
	lease, _ := l.Acquire(ctx, 1)
	fmt.Println(lease.Acquired(), clock.Now().In(paris).Format("Jan 2 15:04"))
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 15h0m0s
	// true Mar 27 00:00
}

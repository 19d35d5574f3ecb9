package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/redis"
)

// footprint is the memory per key of an algorithm on a backend, measured
// in rounds.
type footprint struct {
	algorithm, backend string
	keys               int    // how many each round's figure was taken over
	bytes              spread // bytes per key, a value per round
}

// heapPerLimiter is the heap held per in-memory limiter after one grant,
// over n limiters made by one memory.Factory, as a partitioned limiter's are.
func heapPerLimiter(a algorithm, n int) float64 {
	var ms0, ms1 runtime.MemStats
	ls := make([]memory.Limiter, n)
	f, _ := memory.NewFactory(a.cfg)
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := range ls {
		ls[i] = f.New()
		ls[i].Acquire(context.Background(), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	per := float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(n)
	runtime.KeepAlive(ls)
	return per
}

// redisMemoryKeys is how many keys redisPerKey makes in a round: enough
// that the server's per-key overheads (its dictionaries' slots) are in the
// figure, at the load of the peer benchmark's 50,000 keys
// (BenchmarkRedisMemoryPerKey): 25,000 keys fill a dictionary of 32,768
// slots as 50,000 fill one of 65,536.
const redisMemoryKeys = 25_000

// The rounds of each measurement: the cost cases alternate over theirs, so
// that the run-to-run spread is measured, not guessed.
const (
	memoryCostRounds = 5 // in memory
	redisCostRounds  = 3 // on Redis
	heapRounds       = 3 // memory per key in memory
	redisHeapRounds  = 2 // memory per key on Redis, a server started for each round
)

// dataMemory is the server's used_memory less what its clients' buffers
// hold (mem_clients_normal), which grow and shrink with the connections'
// traffic rather than with the keys.
func dataMemory(ctx context.Context, client *goredis.Client) (int64, error) {
	m, err := info(ctx, client, "memory")
	if err != nil {
		return 0, err
	}
	used, err1 := strconv.ParseInt(m["used_memory"], 10, 64)
	clients, err2 := strconv.ParseInt(m["mem_clients_normal"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	return used - clients, nil
}

// info is the fields of one section of the server's INFO.
func info(ctx context.Context, client goredis.UniversalClient, section string) (map[string]string, error) {
	text, err := client.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// redisPerKey is the growth of the server's used_memory per key over n
// keys of 17 bytes before the algorithm's suffix, one grant each. The keys
// are made on 64 goroutines through a client of their own; the memory is
// read on a connection of its own, before the keys are made and once that
// client's connections are closed, less what the connections' buffers hold
// (mem_clients_normal). Buffers grow and shrink with the traffic, not with
// the keys: read beside 64 busy connections the figure moved by tens of
// bytes per key from round to round, read this way by a byte or two. The
// keys are removed afterwards.
func redisPerKey(ctx context.Context, addr string, a algorithm, n int) (float64, error) {
	meas := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1, ContextTimeoutEnabled: true})
	defer meas.Close()
	before, err := dataMemory(ctx, meas)
	if err != nil {
		return 0, err
	}
	prefix := fmt.Sprintf("b%x:", time.Now().UnixNano()%0xfff)
	defer unlinkMatching(context.WithoutCancel(ctx), meas, prefix+"*")
	work := newClient(addr)
	ls := make([]*redis.Limiter, n)
	// closeAll closes the limiters once their client is closed, so that
	// no release writes a key again.
	closeAll := sync.OnceFunc(func() {
		work.Close()
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	})
	defer closeAll()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := g; k < n; k += 64 {
				l, err := redis.New(work, fmt.Sprintf("k%011d", k), a.kept, redis.WithPrefix(prefix), redis.WithTimeout(stepTimeout))
				if err == nil {
					ls[k] = l
					_, err = l.Acquire(ctx, 1)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	work.Close()
	after, err := dataMemory(ctx, meas)
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

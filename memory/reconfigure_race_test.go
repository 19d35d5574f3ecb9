package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/limitkit/ratelimit/concurrency"
	"github.com/limitkit/ratelimit/memory"
	"github.com/limitkit/ratelimit/tokenbucket"
)

func TestReconfigureRaceStress(t *testing.T) {
	f, _ := memory.NewFactory(concurrency.Config{Limit: 4})
	tf, _ := memory.NewFactory(tokenbucket.Config{Rate: 1000, Burst: 4})
	ls := []memory.Limiter{f.New(), f.New(), tf.New(), tf.New()}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			l := ls[g%4]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(bg, time.Duration(i%3)*time.Millisecond)
				lease, err := l.Wait(ctx, 1+i%3)
				cancel()
				if err == nil && lease.Acquired() {
					if i%2 == 0 {
						l.Refund(bg, lease, 1+i%3)
					}
					lease.Release()
				}
				l.Stats()
				l.IdleFor()
			}
		}(g)
	}
	for i := 0; i < 300; i++ {
		f.Reconfigure(concurrency.Config{Limit: 2 + i%5})
		tf.Reconfigure(tokenbucket.Config{Rate: 1000, Burst: 2 + i%5})
		if i%50 == 0 {
			ls[2].Reset(bg)
		}
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
}

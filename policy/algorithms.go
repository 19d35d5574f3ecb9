package policy

// The algorithms a policy may name: importing an algorithm's package
// registers it, and policies then read and write its configuration through
// its descriptor. A new algorithm is one line here.
import (
	_ "github.com/limitkit/ratelimit/concurrency"
	_ "github.com/limitkit/ratelimit/fixedwindow"
	_ "github.com/limitkit/ratelimit/quota"
	_ "github.com/limitkit/ratelimit/slidinglog"
	_ "github.com/limitkit/ratelimit/slidingwindow"
	_ "github.com/limitkit/ratelimit/tokenbucket"
)

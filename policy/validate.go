package policy

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/limitkit/ratelimit"
	"github.com/limitkit/ratelimit/internal/algo"
)

// goName is the Go name of the field a configuration parameter's JSON
// name names, as the algorithms' Validate errors write it ("per_period":
// "PerPeriod", "queue.limit": "Queue.Limit").
func goName(jsonName string) string {
	b := []byte(jsonName)
	up := true
	out := b[:0]
	for _, c := range b {
		switch {
		case c == '_':
			up = true
			continue
		case c == '.':
			up = true
		case up && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
			up = false
		default:
			up = false
		}
		out = append(out, c)
	}
	return string(out)
}

// jsonNames are the JSON names of every registered algorithm's parameters,
// longest Go name first (so that "Period" is not found in "PerPeriod").
var jsonNames = func() []string {
	set := map[string]bool{"queue.limit": true, "queue.order": true}
	for _, alg := range algo.Names() {
		fields, _ := algo.Fields(alg)
		for _, f := range fields {
			if f.Kind != algo.Queue {
				set[f.Name] = true
			}
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return names
}()

// validateConfig checks cfg, of algorithm alg, with its Validate, and
// what policies shared by a fleet need beyond it: a rate must be finite
// (rate.Inf is for code, not for a shared policy), durations whole
// microseconds, and what the Redis backend refuses (a sliding window's
// segments of whole microseconds). A refusal is a *FieldError naming the
// JSON field the error is about.
func validateConfig(alg string, cfg ratelimit.Config) error {
	d, err := algo.Of("policy", cfg)
	if err != nil {
		return fieldErr("algorithm", fmt.Sprintf("%T", cfg), "is not an algorithm of limitkit")
	}
	values := map[string]any{}
	for _, v := range d.Values() {
		switch v.Kind {
		case algo.Rate:
			if r := v.V.(float64); math.IsNaN(r) || math.IsInf(r, 0) || r == float64(rate.Inf) {
				return fieldErr(alg+"."+v.Name, r, "must be a finite number")
			}
			values[v.Name] = v.V
		case algo.Duration:
			dur := v.V.(time.Duration)
			if dur%time.Microsecond != 0 {
				return fieldErr(alg+"."+v.Name, Duration(dur).String(), "must be a whole number of microseconds")
			}
			values[v.Name] = Duration(dur).String()
		case algo.Queue:
			q := v.V.(ratelimit.Queue)
			values["queue.limit"], values["queue.order"] = q.Limit, q.Order.String()
		default:
			values[v.Name] = v.V
		}
	}
	err = cfg.Validate()
	if err == nil {
		if _, err = d.Redis(algo.RedisOptions{LeaseTTL: time.Second}); err == nil {
			return nil
		}
	}
	// Name the field the algorithm's error names first, in JSON, with its
	// value.
	msg := err.Error()
	field, value := alg, any("")
	best := len(msg)
	for _, name := range jsonNames {
		if i := strings.Index(msg, goName(name)); i >= 0 && i < best {
			best, field, value = i, alg+"."+name, values[name]
		}
	}
	fe := fieldErr(field, value, jsonWords(alg, msg))
	fe.err = err
	return fe
}

// goWords rewrites what the algorithms' Validate errors say in Go's
// words (field names, rate.Inf, interval notation, 2^53, durations such as
// "1m0s") in the words of the JSON form, which is what the admin API and
// the pages show.
var goWords = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`must be > 0 \(or rate\.Inf\)`), "must be above 0"},
	{regexp.MustCompile(`must be in \[(-?\d+), 2\^53\]`), "must be an integer from $1 to " + strconv.FormatInt(1<<53, 10)},
	{regexp.MustCompile(`must be in \[(-?\d+), (\d+)\]`), "must be an integer from $1 to $2"},
	{regexp.MustCompile(`must be in \(0, ([^\]]+)\]`), "must be above 0 and at most $1"},
	{regexp.MustCompile(`must split into Segments (\d+) of whole nanoseconds`), "must split into $1 segments of whole microseconds"},
	{regexp.MustCompile(`, got [^,]*$`), ""},
}

// goDurationRE matches the durations time.Duration's String writes with
// minutes ("1m0s", "1h30m0s"), which Duration's String writes shorter.
var goDurationRE = regexp.MustCompile(`\b\d+h\d+m[\d.]+s\b|\b\d+m[\d.]+s\b`)

// goFieldRE matches the Go names of jsonNames.
var goFieldRE = func() *regexp.Regexp {
	alts := make([]string, len(jsonNames))
	for i, n := range jsonNames {
		alts[i] = regexp.QuoteMeta(goName(n))
	}
	return regexp.MustCompile(`\b(` + strings.Join(alts, "|") + `)\b`)
}()

// jsonWords is the reason of alg's Validate error msg in the JSON form's
// words, without the packages' prefixes and the field the error is about,
// which a FieldError names.
func jsonWords(alg, msg string) string {
	for _, pkg := range []string{alg, "redis"} {
		if _, after, ok := strings.Cut(msg, pkg+": "); ok {
			msg = after
		}
	}
	for _, w := range goWords {
		msg = w.re.ReplaceAllString(msg, w.with)
	}
	msg = goDurationRE.ReplaceAllStringFunc(msg, func(s string) string {
		if d, err := time.ParseDuration(s); err == nil {
			return Duration(d).String()
		}
		return s
	})
	msg = goFieldRE.ReplaceAllStringFunc(msg, func(g string) string {
		for _, n := range jsonNames {
			if goName(n) == g {
				return n
			}
		}
		return g
	})
	// "rate must be ..." and "window 1m must ..." under the field's name:
	// the reason alone.
	for _, n := range jsonNames {
		if rest, ok := strings.CutPrefix(msg, n+" "); ok {
			if i := strings.IndexByte(rest, ' '); i > 0 && !strings.HasPrefix(rest, "must ") && !strings.HasPrefix(rest, "is ") {
				rest = rest[i+1:] // its value
			}
			msg = rest
			break
		}
	}
	return msg
}

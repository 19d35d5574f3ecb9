package otel_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// meter is an SDK MeterProvider read by a ManualReader.
type meter struct {
	*sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
}

func newMeter(t testing.TB) *meter {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &meter{mp, reader}
}

// point is one data point: a sum's value, or a histogram's count and sum.
type point struct {
	attrs attribute.Set
	value int64
	sum   float64
}

// collect reads every point, by instrument name.
func (m *meter) collect(t testing.TB) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[mt.Name] = append(out[mt.Name], point{attrs: p.Attributes, value: p.Value})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[mt.Name] = append(out[mt.Name], point{attrs: p.Attributes, value: p.Value})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[mt.Name] = append(out[mt.Name], point{attrs: p.Attributes, value: int64(p.Count), sum: p.Sum})
				}
			default:
				t.Fatalf("%s: unexpected data %T", mt.Name, mt.Data)
			}
		}
	}
	return out
}

// value sums the points of name whose attributes hold every "key=value" of
// kv (a histogram's: its count).
func value(points map[string][]point, name string, kv ...string) int64 {
	var n int64
	for _, p := range points[name] {
		if matches(p.attrs, kv) {
			n += p.value
		}
	}
	return n
}

func matches(s attribute.Set, kv []string) bool {
	for _, want := range kv {
		k, v, _ := strings.Cut(want, "=")
		got, ok := s.Value(attribute.Key(k))
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// dump lists the points, for failure messages.
func dump(points map[string][]point) string {
	var lines []string
	for name, ps := range points {
		for _, p := range ps {
			lines = append(lines, fmt.Sprintf("%s{%s} %d", name, p.attrs.Encoded(attribute.DefaultEncoder()), p.value))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// want checks exact values: each entry is a name, its attributes and the
// value expected.
type want struct {
	name  string
	kv    []string
	value int64
}

func check(t testing.TB, points map[string][]point, wants []want) {
	t.Helper()
	for _, w := range wants {
		if got := value(points, w.name, w.kv...); got != w.value {
			t.Errorf("%s%v = %d, want %d", w.name, w.kv, got, w.value)
		}
	}
	if t.Failed() {
		t.Logf("points:\n%s", dump(points))
	}
}

// startRedis starts a redis-server on a free loopback port (never 6379),
// stopped, by its process, when t ends. Without a redis-server on PATH the
// test is skipped, unless RATELIMIT_REQUIRE_REDIS=1, which makes it fail.
// REDIS_ADDR points it at a server that already runs instead.
func startRedis(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" {
			t.Fatal("real Redis required (RATELIMIT_REQUIRE_REDIS=1): no redis-server on PATH")
		}
		t.Skip("skipping real-Redis test: no redis-server on PATH (install redis-server or set REDIS_ADDR)")
	}
	dir := t.TempDir()
	for attempt := 0; attempt < 5; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill() // this process only
			<-exited
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			select {
			case <-exited:
				deadline = time.Time{}
				continue
			default:
			}
			if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
				c.Close()
				t.Cleanup(stop)
				return addr
			}
		}
		stop()
	}
	t.Fatal("could not start redis-server")
	return ""
}

// Package redistest starts real redis-server processes for tests, on free
// loopback ports (never 6379), and stops exactly the processes it started.
//
// REDIS_ADDR (one address) and REDIS_CLUSTER_ADDRS (comma-separated) point the
// tests at servers that already run instead. When neither a redis-server on
// PATH nor those variables are available, tests skip with a message, unless
// RATELIMIT_REQUIRE_REDIS=1, which turns the skip into a failure (CI sets it).
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Server is one redis-server process started by Start.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	args []string
}

func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("RATELIMIT_REQUIRE_REDIS") == "1" {
		t.Fatalf("real Redis required (RATELIMIT_REQUIRE_REDIS=1): %s", why)
	}
	t.Skipf("skipping real-Redis test: %s (install redis-server or set REDIS_ADDR)", why)
}

// Standalone returns the address of a standalone server: REDIS_ADDR, or a
// server started for this test and stopped at its end.
func Standalone(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	return Start(t).Addr
}

// Start starts a redis-server on a free loopback port, stopped when t ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "no redis-server on PATH")
	}
	s, err := StartServer(t.TempDir(), extra...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts a redis-server on a free loopback port with its files
// in dir; the caller stops it. For programs (the bench program) as for tests.
// A first extra argument that is not an option is a config file, which
// redis-server wants first.
func StartServer(dir string, extra ...string) (*Server, error) {
	var conf []string
	if len(extra) > 0 && !strings.HasPrefix(extra[0], "--") {
		conf, extra = extra[:1], extra[1:]
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
		s.args = append(append(conf[:len(conf):len(conf)],
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", s.dir,
			"--logfile", filepath.Join(s.dir, "redis-"+strconv.Itoa(port)+".log"),
		), extra...)
		if lastErr = s.run(bin); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("could not start redis-server: %v", lastErr)
}

func (s *Server) run(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited: %v; log: %s", err, s.log())
		default:
		}
		if c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond); err == nil {
			c.Close()
			go func() { <-exited }() // reap when stopped
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd.Process.Kill()
	return fmt.Errorf("redis-server on %s not ready after 10s", s.Addr)
}

func (s *Server) log() string {
	b, _ := os.ReadFile(s.args[slices.Index(s.args, "--logfile")+1])
	return strings.TrimSpace(string(b))
}

// Stop kills the server process (only this one) and waits for it to go.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	for i := 0; i < 200; i++ {
		if c, err := net.DialTimeout("tcp", s.Addr, 20*time.Millisecond); err != nil {
			return
		} else {
			c.Close()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restart starts the server again on the same port, after Stop, with the
// same options and files: a server that persists (--appendonly yes, with
// --appendfsync always for every acknowledged write) has its data back, and
// a Cluster node its nodes.conf, so it rejoins its cluster as the same node
// serving the same slots (see WaitClusterOK).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	bin, _ := exec.LookPath("redis-server")
	if err := s.run(bin); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

// Pause stops the server's process, exactly the one started, with SIGSTOP,
// and returns once it is stopped: it keeps its data and its connections, the
// kernel still accepts connections and holds what clients send, and it
// answers nothing until Resume, when it runs what was sent meanwhile.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP, true)
}

// Resume lets a paused server run again (SIGCONT) and returns once it does.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT, false)
}

func (s *Server) signal(t testing.TB, sig syscall.Signal, stop bool) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %v to %s: %v", sig, s.Addr, err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if s.stopped() == stop {
			return
		}
	}
	state := "running"
	if stop {
		state = "stopped"
	}
	t.Fatalf("redistest: %s (pid %d) still not %s after 5s", s.Addr, s.cmd.Process.Pid, state)
}

// stopped reports whether the process is stopped by a signal: state T in
// /proc/PID/stat, the field after the command name's closing parenthesis.
func (s *Server) stopped() bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	i := bytes.LastIndexByte(b, ')')
	return err == nil && i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}

// Sentinel starts a master and a sentinel (redis-server --sentinel) that
// monitors it under the name "limitkit", and returns the sentinel's address.
func Sentinel(t testing.TB) string {
	t.Helper()
	master := Start(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte("sentinel monitor limitkit "+host+" "+port+" 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(dir, conf, "--sentinel")
	if err != nil {
		t.Fatalf("redistest: sentinel: %v", err)
	}
	t.Cleanup(s.Stop)
	return s.Addr
}

// Cluster returns the addresses of a 3-master Redis Cluster with every slot
// assigned: REDIS_CLUSTER_ADDRS, or servers started for this test.
func Cluster(t testing.TB) []string {
	t.Helper()
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		return strings.Split(addrs, ",")
	}
	var addrs []string
	for _, n := range StartCluster(t) {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}

// StartCluster starts a 3-master Redis Cluster with every slot assigned,
// each node started by Start with the extra options too, and returns its
// nodes, stopped when t ends. A test that stops a node and restarts it
// (Restart, then WaitClusterOK) starts them here.
func StartCluster(t testing.TB, extra ...string) []*Server {
	t.Helper()
	var nodes []*Server
	for i := 0; i < 3; i++ {
		nodes = append(nodes, Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000"}, extra...)...))
	}
	ctx := context.Background()
	for i, n := range nodes {
		c := goredis.NewClient(&goredis.Options{Addr: n.Addr})
		lo, hi := i*16384/3, (i+1)*16384/3-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("redistest: ADDSLOTSRANGE on %s: %v", n.Addr, err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(nodes[0].Addr)
			if err := c.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				t.Fatalf("redistest: CLUSTER MEET: %v", err)
			}
		}
		c.Close()
	}
	for _, n := range nodes {
		WaitClusterOK(t, n.Addr)
	}
	return nodes
}

// WaitClusterOK waits until the cluster node at addr knows the 3 nodes and
// reports cluster_state:ok: every slot is served, and a node restarted
// serves its own slots again (a master that rejoins waits about 2s before
// it accepts writes).
func WaitClusterOK(t testing.TB, addr string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		info, err := c.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
			return
		}
	}
	t.Fatalf("redistest: cluster node %s not ok after 20s", addr)
}

// freePort asks the kernel for a free loopback port whose cluster bus port
// (port+10000) is free too.
func freePort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port == 6379 || port+10000 > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
			bus.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port pair")
}

// UsedMemory reads used_memory from INFO memory.
func UsedMemory(ctx context.Context, c goredis.UniversalClient) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "used_memory:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

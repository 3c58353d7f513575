package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge"
)

// bridgeProc is a `bridge serve --http` (or proxy) started by a test.
type bridgeProc struct {
	name string
	e    *engine
	cmd  *exec.Cmd
	addr string
	logs *syncBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit, once done
}

func (b *bridgeProc) pid() int { return b.cmd.Process.Pid }

// exitCode is the process's exit code once done, -1 for a signal.
func (b *bridgeProc) exitCode() int { return b.cmd.ProcessState.ExitCode() }

// startServeHTTP starts `bridge serve --http 127.0.0.1:0` on e with extra
// flags and returns once it listens. At the end of the test it is
// stopped (SIGINT, a second one after a second if it still runs).
func startServeHTTP(t *testing.T, name string, e *engine, extra ...string) *bridgeProc {
	t.Helper()
	args, env := serveArgs(e)
	if slices.Contains(extra, "--proxy-url") {
		i := slices.Index(args, "--servers-config")
		args = slices.Delete(args, i, i+2)
	}
	if slices.Contains(extra, "--policy") {
		args = withoutSandboxFlags(args)
	}
	args = append(append(args, "--http", "127.0.0.1:0"), extra...)
	cmd := exec.Command(testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), append(env, "BRIDGE_LOG_LEVEL=info")...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &bridgeProc{name: name, e: e, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	go func() {
		b.err = cmd.Wait()
		pw.Close()
		close(b.done)
	}()
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"addr":"(127\.0\.0\.1:[0-9]+)"`)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			b.logs.Write([]byte(line + "\n"))
			if m := re.FindStringSubmatch(line); m != nil && strings.Contains(line, "serving MCP over HTTP") {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		b.stop(t, 10*time.Second)
		if t.Failed() {
			t.Logf("%s (pid %d) stderr:\n%s", name, b.pid(), b.logs.String())
		}
	})
	select {
	case b.addr = <-addr:
	case <-b.done:
		t.Fatalf("%s exited before it listened: %v\n%s", name, b.err, b.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never said where it listens:\n%s", name, b.logs.String())
	}
	return b
}

// stop signals the bridge (SIGINT, and again each second) until it exits,
// killing it after within.
func (b *bridgeProc) stop(t *testing.T, within time.Duration) {
	deadline := time.After(within)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	_ = b.cmd.Process.Signal(os.Interrupt)
	for {
		select {
		case <-b.done:
			return
		case <-tick.C:
			_ = b.cmd.Process.Signal(os.Interrupt)
		case <-deadline:
			_ = b.cmd.Process.Kill()
			<-b.done
			t.Errorf("%s did not stop within %s of SIGINT", b.name, within)
			return
		}
	}
}

// sessionsRun counts, from the bridge's log, the runs each MCP session
// (Mcp-Session-Id) made on it.
func (b *bridgeProc) sessionsRun() map[string]int {
	re := regexp.MustCompile(`"mcp_session":"([^"]+)"`)
	out := map[string]int{}
	for _, line := range strings.Split(b.logs.String(), "\n") {
		if m := re.FindStringSubmatch(line); m != nil && strings.Contains(line, "run finished") {
			out[m[1]]++
		}
	}
	return out
}

// namedSessions lists the run_python sessions (by name) started on the
// bridge, from its log.
func (b *bridgeProc) namedSessions() map[string]bool {
	re := regexp.MustCompile(`"name":"([^"]+)"`)
	out := map[string]bool{}
	for _, line := range strings.Split(b.logs.String(), "\n") {
		if m := re.FindStringSubmatch(line); m != nil && strings.Contains(line, "session started") {
			out[m[1]] = true
		}
	}
	return out
}

// haproxyBinary is Debian's haproxy: missing, it fails the test in CI and
// skips it elsewhere.
func haproxyBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("haproxy")
	if err == nil {
		return path
	}
	if ci() {
		t.Fatal("haproxy is not installed: integration/env/setup.sh installs it (apt-get install haproxy)")
	}
	t.Skip("haproxy is not installed (apt-get install haproxy)")
	return ""
}

// startHAProxy runs haproxy on docs/examples/haproxy.cfg, its placeholders filled
// in: a free loopback port to listen on, and the bridges. It returns the
// address it listens on once every bridge is up in it.
func startHAProxy(t *testing.T, bridges []*bridgeProc) string {
	t.Helper()
	bin := haproxyBinary(t)
	cfg, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "examples", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	listen := freeLoopbackAddr(t)
	text := strings.ReplaceAll(string(cfg), "{{LISTEN}}", listen)
	for i, b := range bridges {
		text = strings.ReplaceAll(text, fmt.Sprintf("{{BRIDGE%d}}", i+1), b.addr)
	}
	if regexp.MustCompile(`\{\{[A-Z0-9_]+\}\}`).MatchString(text) {
		t.Fatalf("docs/examples/haproxy.cfg has a placeholder this test does not fill:\n%s", text)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// -db: in the foreground, logging to stdout.
	cmd := exec.Command(bin, "-db", "-f", path)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exitedCh := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exitedCh) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exitedCh:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exitedCh
		}
		if t.Failed() {
			t.Logf("haproxy log:\n%s", logs.String())
		}
	})
	// Up: it listens, and has seen every bridge's /readyz answer 200 twice
	// (rise 2, inter 1s): until then it may not send to them all.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exitedCh:
			t.Fatalf("haproxy exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy never listened on %s:\n%s", listen, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2500 * time.Millisecond)
	return listen
}

// readyz GETs http://addr/readyz and returns its status code.
func readyzStatus(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz of %s: %v", addr, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// balancedClient is one MCP client through the balancer; it reconnects
// when asked to. A legacy client (MCP 2025-11-25) has an MCP session, which
// the balancer sticks to a bridge; a modern one (2026-07-28) has none, and
// names a run_python session of its own in each call, which the balancer
// sticks to a bridge by its Mcp-Param-Session header.
type balancedClient struct {
	n        int
	endpoint string
	modern   bool
	token    string // a modern client's principal's
	cs       *mcp.ClientSession
	sessions []string // a legacy client's every MCP session id, the last one current
	count    int      // a modern client's runs in its current session
}

// session is the run_python session a modern client names.
func (c *balancedClient) session() string { return fmt.Sprintf("c%d", c.n) }

func (c *balancedClient) connect(ctx context.Context) error {
	tr := &mcp.StreamableClientTransport{Endpoint: c.endpoint}
	opts := &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion}
	if c.modern {
		tr.HTTPClient = &http.Client{Transport: bearer(c.token)}
		opts = nil
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprintf("balanced-%d", c.n), Version: "1"}, nil).Connect(ctx, tr, opts)
	if err != nil {
		return err
	}
	if c.modern {
		if _, err := cs.ListTools(ctx, nil); err != nil {
			return err
		}
	}
	if c.cs != nil {
		c.cs.Close()
	}
	c.cs = cs
	if !c.modern {
		c.sessions = append(c.sessions, cs.ID())
	}
	return nil
}

// run makes one run_python call with two tool calls to the upstream
// through the shared proxy, and checks what it printed; a modern client's
// call runs in its session, and counts its runs there.
func (c *balancedClient) run(ctx context.Context, i int, sleep time.Duration) error {
	code := fmt.Sprintf(`
import mcp_tools, time
a = mcp_tools.call("everything", "echo", message="c%[1]d r%[2]d a")
time.sleep(%[3]f)
b = mcp_tools.call("everything", "echo", message="c%[1]d r%[2]d b")
print(a, b, sep="|")
`, c.n, i, sleep.Seconds())
	args := map[string]any{"code": code}
	if c.modern {
		args["session"] = c.session()
		args["code"] = code + "count = globals().get('count', 0) + 1\nprint('count', count)\n"
	}
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: args})
	if err != nil {
		return err
	}
	want := fmt.Sprintf("Echo: c%[1]d r%[2]d a|Echo: c%[1]d r%[2]d b", c.n, i)
	text := contentText(res)
	if res.IsError || !strings.Contains(text, want) {
		return fmt.Errorf("client %d run %d: error %v, answered:\n%s", c.n, i, res.IsError, text)
	}
	if c.modern {
		if strings.Contains(text, "is new: nothing of earlier calls is in it") {
			c.count = 0
		}
		c.count++
		if !strings.Contains(text, fmt.Sprintf("count %d\n", c.count)) {
			return fmt.Errorf("client %d run %d: its session lost its state (another bridge?): want count %d, answered:\n%s", c.n, i, c.count, text)
		}
	}
	return nil
}

// balancedPolicy writes the policy of one balanced bridge on e: sessions
// and tasks on.
func balancedPolicy(t *testing.T, e *engine, dir string, i int) string {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("bridge%d.yaml", i+1))
	pol := "version: 1\n" + sandboxSection(e) + "  max_concurrent: 6\n  queue: 30\nsessions:\n  enabled: true\n  max: 64\ntasks:\n  after: 500ms\n"
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHAProxyBalancesBridges puts three `bridge serve --http` behind
// HAProxy (docs/examples/haproxy.cfg), all on one shared `bridge proxy --http`
// with server-everything upstream and a per-run budget. 30 clients at
// once, legacy (2025-11-25, sticky by Mcp-Session-Id) and modern
// (2026-07-28, stateless, two principals, each naming a run_python session
// that sticks by its Mcp-Param-Session header), make runs with tool calls:
// every MCP session and every named session stays on one bridge (a
// session's count of runs goes up by one each call); another principal
// naming a session is refused; tasks' polls reach the bridge that runs
// them. Then one bridge is stopped (SIGTERM): it drains, its runs in
// flight finish, its clients' next call is refused with an error that
// says to reconnect (or the call reaches another bridge, whose answer says
// the session is new), and they go on elsewhere; the other clients see no
// error. The budget holds across bridges, and no container is left on any
// engine.
func TestHAProxyBalancesBridges(t *testing.T) {
	// Three bridges and their warm pools would also want more run pods
	// than the test cluster's one node has room for (2 cores, 0.25 a pod).
	engines := enginesFor(t, aboveEngine("balancing bridges behind HAProxy"))
	if rootless() {
		t.Skip("the balancer does not depend on the engine's mode, and its bridges run on both rootful engines: TestHAProxyBalancesBridges runs in the rootful pass")
	}
	haproxyBinary(t)
	start := time.Now()

	// The shared proxy: server-everything over stdio, a budget of 5 tool
	// calls per run.
	npm := npmPeers(t)
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers.json")
	writeServers(t, servers, map[string]any{
		"everything": map[string]any{"command": "node", "args": []string{
			filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
	})
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("version: 1\nbudgets:\n  max_calls_per_run: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proxyAddr, _ := startProxy(t, servers, "--policy", policyFile)
	proxyURL := "http://" + proxyAddr + "/mcp"
	// The proxy is ready once its upstream is connected.
	deadline := time.Now().Add(30 * time.Second)
	for readyzStatus(t, proxyAddr) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("bridge proxy's /readyz never answered 200")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Three bridges, on the engines under test in turn (docker and
	// podman both take part when both are tested), each named by
	// --instance as its server line is, with two principals (legacy
	// clients come without a token: the local user).
	const alice, bob = "alice-0123456789abcdef0123456789abcdef", "bob-0123456789abcdef0123456789abcdef01"
	principals := principalsFile(t, "alice "+alice, "bob "+bob)
	var bridges []*bridgeProc
	for i := range 3 {
		e := engines[i%len(engines)]
		bridges = append(bridges, startServeHTTP(t, fmt.Sprintf("bridge%d (%s)", i+1, e.name), e,
			"--proxy-url", proxyURL, "--policy", balancedPolicy(t, e, dir, i), "--principals", principals,
			"--instance", fmt.Sprintf("bridge%d", i+1), "--drain-timeout", "20s"))
	}
	for _, b := range bridges {
		deadline := time.Now().Add(30 * time.Second)
		for readyzStatus(t, b.addr) != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("%s's /readyz never answered 200:\n%s", b.name, b.logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	lb := startHAProxy(t, bridges)
	endpoint := "http://" + lb + "/mcp"

	// 30 clients, 3 runs each, at once: the even ones legacy, the odd
	// ones modern, of alice and bob in turn.
	const nClients, nRuns = 30, 3
	clients := make([]*balancedClient, nClients)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, nClients*nRuns)
	for i := range clients {
		c := &balancedClient{n: i, endpoint: endpoint, modern: i%2 == 1, token: []string{alice, bob}[(i/2)%2]}
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.connect(ctx); err != nil {
				errs <- fmt.Errorf("client %d: connecting: %w", c.n, err)
				return
			}
			for r := range nRuns {
				if err := c.run(ctx, r, 0); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() {
		for _, c := range clients {
			if c.cs != nil {
				c.cs.Close()
			}
		}
	})

	// Each legacy MCP session's runs all ran on one bridge, and so did
	// each modern client's named session (its count says so: checked by
	// run); the sessions are spread over the bridges.
	// (The log lines of the last runs may still be on their way.)
	logged := func() int {
		n := 0
		for _, b := range bridges {
			for _, runs := range b.sessionsRun() {
				n += runs
			}
		}
		return n
	}
	for deadline := time.Now().Add(5 * time.Second); logged() < nClients/2*nRuns && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	home := map[string]int{} // MCP session id, or run_python session name -> bridge index
	for bi, b := range bridges {
		for s, n := range b.sessionsRun() {
			if prev, ok := home[s]; ok {
				t.Errorf("session %s ran on %s and on %s", s, bridges[prev].name, b.name)
			}
			home[s] = bi
			if n != nRuns {
				t.Errorf("session %s made %d runs on %s, want %d", s, n, b.name, nRuns)
			}
		}
		for name := range b.namedSessions() {
			if prev, ok := home[name]; ok {
				t.Errorf("session %q started on %s and on %s", name, bridges[prev].name, b.name)
			}
			home[name] = bi
		}
	}
	homeOf := func(c *balancedClient) (int, bool) {
		if c.modern {
			bi, ok := home[c.session()]
			return bi, ok
		}
		bi, ok := home[c.sessions[0]]
		return bi, ok
	}
	perBridge := make([]int, len(bridges))
	modernPer := make([]int, len(bridges))
	for _, c := range clients {
		bi, ok := homeOf(c)
		if !ok {
			t.Fatalf("client %d's session is in no bridge's log", c.n)
		}
		perBridge[bi]++
		if c.modern {
			modernPer[bi]++
		}
	}
	t.Logf("sessions per bridge: %v, of them modern: %v (%s)", perBridge, modernPer, time.Since(start).Round(time.Millisecond))
	victim := slices.Index(perBridge, slices.Max(perBridge))
	if perBridge[victim] < 2 {
		t.Fatalf("sessions per bridge %v: the balancer did not spread them", perBridge)
	}
	for i, n := range perBridge {
		if n == 0 {
			t.Errorf("no session on %s: sessions per bridge %v", bridges[i].name, perBridge)
		}
	}

	// Nobody reaches another principal's session: bob naming alice's
	// session is sent to its bridge, which refuses him.
	var alices *balancedClient
	for _, c := range clients {
		if c.modern && c.token == alice {
			alices = c
			break
		}
	}
	res, jerr := modernCall(t, endpoint, bob, "tools/call", "run_python", alices.session(),
		map[string]any{"name": "run_python", "arguments": map[string]any{"code": "print(count)", "session": alices.session()}}, false)
	if jerr != nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "is held by another principal") {
		t.Errorf("bob naming alice's session %s through the balancer: %v %v", alices.session(), res, jerr)
	}

	// Tasks: their polls reach the bridge that runs them, by the instance
	// their id starts with.
	var tasks []string
	for i := range 4 {
		res, jerr := modernCall(t, endpoint, alice, "tools/call", "run_python", "", map[string]any{"name": "run_python",
			"arguments": map[string]any{"code": fmt.Sprintf("import time\ntime.sleep(2)\nprint('task %d')", i)}}, true)
		id, _ := res["taskId"].(string)
		if jerr != nil || id == "" || !strings.HasPrefix(id, "bridge") {
			t.Fatalf("a task through the balancer: %v %v", res, jerr)
		}
		tasks = append(tasks, id)
	}
	instances := map[string]bool{}
	for i, id := range tasks {
		got := awaitModernTask(t, endpoint, alice, id, time.Minute)
		if result, _ := got["result"].(map[string]any); got["status"] != "completed" || !strings.Contains(fmt.Sprint(result["content"]), fmt.Sprintf("task %d", i)) {
			t.Errorf("task %s through the balancer: %v", id, got)
		}
		instances[id[:strings.Index(id, "-")]] = true
	}
	t.Logf("4 tasks ran on %d bridges", len(instances))

	// The budget is per run, whichever bridge the run is on: 5 calls,
	// then LimitExceededError, with the proxy shared by all.
	overBudget := 0
	for bi := range bridges {
		var c *balancedClient
		for _, cc := range clients {
			if h, _ := homeOf(cc); h == bi && bi != victim && !cc.modern {
				c = cc
				break
			}
		}
		if c == nil {
			continue
		}
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": `
import mcp_tools
for i in range(7):
    try:
        mcp_tools.call("everything", "echo", message=str(i))
        print("ok", i)
    except mcp_tools.LimitExceededError as e:
        print("limit", i, "max_calls_per_run" in str(e))
`}})
		if err != nil {
			t.Fatal(err)
		}
		if want := "ok 0\nok 1\nok 2\nok 3\nok 4\nlimit 5 True\nlimit 6 True\n"; !strings.Contains(contentText(res), want) {
			t.Errorf("over budget on %s:\n%s\nwant\n%s", bridges[bi].name, contentText(res), want)
		}
		overBudget++
	}
	// The shared proxy's /metrics counted each refusal once, whichever
	// bridge the run was on.
	if got := scrapeValue(t, "http://"+proxyAddr+"/metrics", `bridge_budget_cutoffs_total{budget="budgets.max_calls_per_run"}`); got != float64(2*overBudget) {
		t.Errorf("the proxy counted %v calls over budget, want %d", got, 2*overBudget)
	}

	stopVictim(t, ctx, bridges, victim, clients, homeOf)

	// Everything stops; no container is left on any engine.
	for _, c := range clients {
		c.cs.Close()
	}
	for _, b := range bridges {
		b.stop(t, 10*time.Second)
		if b.exitCode() != 0 {
			t.Errorf("%s exited with %d", b.name, b.exitCode())
		}
	}
	for _, b := range bridges {
		if n := ownedBy(t, b.e, b.pid()); n != 0 {
			t.Errorf("%s left %d containers on %s", b.name, n, b.e.name)
		}
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// stopVictim stops bridges[victim] in the middle of its runs. Its clients
// each have a run in flight (one of them a longer one, so the bridge is
// still draining when the others' runs end); the other clients go on
// making runs meanwhile. The runs in flight finish; a legacy client's next
// call is refused, clearly, and after reconnecting (through the balancer)
// it goes on elsewhere; a modern client's next call is refused likewise,
// or reaches another bridge whose answer says its session is new, and it
// goes on there.
func stopVictim(t *testing.T, ctx context.Context, bridges []*bridgeProc, victim int, clients []*balancedClient, homeOf func(*balancedClient) (int, bool)) {
	v := bridges[victim]
	var mine, others []*balancedClient
	for _, c := range clients {
		if h, _ := homeOf(c); h == victim {
			mine = append(mine, c)
		} else {
			others = append(others, c)
		}
	}
	othersErr := make(chan error, len(others))
	var owg sync.WaitGroup
	for _, c := range others {
		owg.Add(1)
		go func() {
			defer owg.Done()
			if err := c.run(ctx, 10, 300*time.Millisecond); err != nil {
				othersErr <- err
			}
		}()
	}
	type outcome struct {
		c        *balancedClient
		runErr   error // the run in flight at SIGTERM
		nextErr  error // the call after it
		againErr error // the run after reconnecting
	}
	outcomes := make(chan outcome, len(mine))
	for i, c := range mine {
		// In flight at SIGTERM: it sleeps past it.
		sleep := 1500 * time.Millisecond
		if i == 0 {
			sleep = 5 * time.Second
		}
		go func() {
			o := outcome{c: c}
			defer func() { outcomes <- o }()
			if o.runErr = c.run(ctx, 100, sleep); o.runErr != nil {
				return
			}
			if o.nextErr = c.run(ctx, 101, 0); o.nextErr == nil {
				return
			}
			if c.modern {
				// Its session's name sticks to the draining bridge until that
				// one is gone (persist): the draining error each time, then
				// another bridge, where the session is new.
				for k := 102; ; k++ {
					o.againErr = c.run(ctx, k, 0)
					var je *jsonrpc.Error
					if !errors.As(o.againErr, &je) || je.Code != bridge.CodeDraining || ctx.Err() != nil {
						return
					}
					time.Sleep(500 * time.Millisecond)
				}
			}
			if o.againErr = c.connect(ctx); o.againErr == nil {
				o.againErr = c.run(ctx, 102, 0)
			}
		}()
	}
	time.Sleep(700 * time.Millisecond) // the victim has the calls
	sigterm := time.Now()
	if err := v.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Not ready at once; no new session there.
	time.Sleep(100 * time.Millisecond)
	if code := readyzStatus(t, v.addr); code != http.StatusServiceUnavailable {
		t.Errorf("the draining bridge's /readyz answered %d, want 503", code)
	}
	resp, err := http.Post("http://"+v.addr+"/mcp", "application/json",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"late","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "draining") {
		t.Errorf("a new session on the draining bridge: %d, Retry-After %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	drainErrors, movedOn := 0, 0
	for range mine {
		o := <-outcomes
		if o.runErr != nil {
			t.Errorf("client %d: the run in flight at SIGTERM failed: %v", o.c.n, o.runErr)
			continue
		}
		var je *jsonrpc.Error
		switch {
		case o.nextErr == nil && o.c.modern && o.c.count == 1:
			// It reached another bridge, which said the session is new.
			movedOn++
			continue
		case errors.As(o.nextErr, &je) && je.Code == bridge.CodeDraining && strings.Contains(je.Message, "Reconnect"):
			drainErrors++
		case !o.c.modern && errors.Is(o.nextErr, mcp.ErrSessionMissing):
			// The bridge had gone already: the balancer sent the call to
			// another bridge, which does not know the session.
		default:
			t.Errorf("client %d (modern %v): the call after SIGTERM: %v; want the draining error", o.c.n, o.c.modern, o.nextErr)
			continue
		}
		if o.againErr != nil {
			t.Errorf("client %d after reconnecting: %v", o.c.n, o.againErr)
		} else if o.c.modern && o.c.count != 1 {
			t.Errorf("client %d's session went on elsewhere with count %d: its result did not say the session is new", o.c.n, o.c.count)
		}
	}
	t.Logf("the stopped bridge's %d clients: %d told it drains, %d moved on to a new session elsewhere", len(mine), drainErrors, movedOn)
	if drainErrors == 0 {
		t.Errorf("no client of the draining bridge was told it drains")
	}
	select {
	case <-v.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s still runs 15 s after SIGTERM", v.name)
	}
	t.Logf("%s exited %s after SIGTERM with code %d", v.name, time.Since(sigterm).Round(time.Millisecond), v.exitCode())
	if v.exitCode() != 0 {
		t.Errorf("%s exited with %d (%v), want 0", v.name, v.exitCode(), v.err)
	}
	if !strings.Contains(v.logs.String(), "drained: no run in flight") {
		t.Errorf("%s did not drain:\n%s", v.name, v.logs.String())
	}
	owg.Wait()
	close(othersErr)
	for err := range othersErr {
		t.Errorf("a client of another bridge: %v", err)
	}

	// The reconnected legacy sessions ran on the other bridges.
	for _, c := range mine {
		if c.modern {
			continue
		}
		last := c.sessions[len(c.sessions)-1]
		found := ""
		for bi, b := range bridges {
			if b.sessionsRun()[last] > 0 {
				if bi == victim {
					t.Errorf("client %d's new session %s ran on the stopped bridge", c.n, last)
				}
				found = b.name
			}
		}
		if len(c.sessions) > 1 && found == "" {
			t.Errorf("client %d's new session %s ran nowhere", c.n, last)
		}
	}
}

// scrapeValue GETs a Prometheus text page and returns the value of the
// series written exactly as series, or -1 when it is not there.
func scrapeValue(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return -1
}

package runsc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
)

// logLimit is how much of a sandbox's own stdout and stderr is kept (the
// runner's diagnostics), as Docker keeps 1 MB of a container's.
const logLimit = 1 << 20

// sandboxLog is the tail of a sandbox's stdout and stderr. runsc hands
// them a pipe that a goroutine drains until the sandbox ends: a file would
// let the code fill the host's disk.
type sandboxLog struct {
	mu   sync.Mutex
	tail *engines.LogTail
	done chan struct{} // closed when the pipe is drained
}

func (l *sandboxLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail.Write(p)
}

func (l *sandboxLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail.String()
}

// drainWait bounds the wait for a sandbox's last words once it has ended.
const drainWait = 2 * time.Second

// bundle is container id's bundle folder.
func (c *Client) bundle(id string) string { return filepath.Join(c.opts.Dir, "bundles", id) }

// Create implements [sandbox.Runtime]: it writes the bundle of spec (id
// spec.Name), its root the image's cached file system; Start runs it. The
// runner gets EnvTokenFile, so that it can park for a checkpoint.
func (c *Client) Create(ctx context.Context, spec sandbox.ContainerSpec) (string, error) {
	id := spec.Name
	if err := c.writeBundle(ctx, id, spec); err != nil {
		return "", fmt.Errorf("create container %s: %w", id, err)
	}
	return id, nil
}

// writeBundle writes container id's bundle from spec, refusing an id that
// has one.
func (c *Client) writeBundle(ctx context.Context, id string, spec sandbox.ContainerSpec) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("the runsc engine names a sandbox by letters, digits, '.', '_' and '-' only (up to 128), got %q", id)
	}
	if err := checkSpec(spec, c.opts); err != nil {
		return err
	}
	rootfs, env, imageID, err := c.rootfs(ctx, spec.Image)
	if err != nil {
		return err
	}
	spec.Env = mapsWith(spec.Env, EnvTokenFile, TokenFile)
	cfg, err := bundleConfig(spec, id, rootfs, env, c.opts)
	if err != nil {
		return err
	}
	dir := c.bundle(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("a sandbox named %s exists already", id)
		}
		return err
	}
	if err := writeBundle(dir, cfg, stateFile{ID: id, Image: spec.Image, ImageID: imageID, Labels: spec.Labels}); err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	return nil
}

// mapsWith is m with k set to v, m unchanged.
func mapsWith(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for mk, mv := range m {
		out[mk] = mv
	}
	out[k] = v
	return out
}

// Start implements [sandbox.Runtime]: runsc run -detach, the sandbox's
// stdout and stderr into a pipe drained into its log (Logs), then waits
// for its end in the background.
func (c *Client) Start(ctx context.Context, id string) error {
	return c.launch(ctx, id, "run", "--bundle", c.bundle(id), "-detach", id)
}

// launch runs a command that starts sandbox id (run, restore) and starts
// waiting for its end.
func (c *Client) launch(ctx context.Context, id string, args ...string) error {
	dir := c.bundle(id)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("start container %s: %w", id, sandbox.ErrNotFound)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	log := &sandboxLog{tail: engines.NewLogTail(logLimit), done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(log, pr)
		pr.Close()
		close(log.done)
	}()
	c.mu.Lock()
	c.logs[id] = log
	c.mu.Unlock()
	_, err = c.command(ctx, dir, pw, append(runFlags(c.opts), args...)...)
	pw.Close() // the sandbox holds its own copy
	if err != nil {
		select {
		case <-log.done:
		case <-time.After(drainWait):
		}
		return fmt.Errorf("start container %s: %w: %s", id, err, strings.TrimSpace(lastLines(log.String(), 2048)))
	}
	p := &proc{done: make(chan struct{})}
	c.mu.Lock()
	c.procs[id] = p
	c.mu.Unlock()
	go func() {
		p.state, p.err = c.wait(id)
		close(p.done)
	}()
	return nil
}

// waitResult is what `runsc wait` prints.
type waitResult struct {
	ID         string `json:"id"`
	ExitStatus int    `json:"exitStatus"`
}

// wait is `runsc wait`: the sandbox's end (128 + the signal for one killed).
// When the host's kernel killed the sandbox itself (its memory limit: the
// cgroup's OOM killer takes gVisor's own processes), runsc has no status
// and says so: that is a SIGKILL, an OOM kill if the sandbox's cgroup
// counted one.
func (c *Client) wait(id string) (sandbox.ExitState, error) {
	out, err := c.command(context.Background(), "", nil, "wait", id)
	if err != nil {
		if !strings.Contains(err.Error(), "exit status is unavailable") {
			return sandbox.ExitState{}, err
		}
		out = fmt.Appendf(nil, `{"id":%q,"exitStatus":%d}`, id, 128+int(syscall.SIGKILL))
	}
	var w waitResult
	if err := json.Unmarshal(out, &w); err != nil {
		return sandbox.ExitState{}, fmt.Errorf("runsc wait %s: %w", id, err)
	}
	st := sandbox.ExitState{ExitCode: w.ExitStatus}
	if w.ExitStatus == 128+int(syscall.SIGKILL) && c.memoryLimited(id) {
		if n, ok := oomKills(c.cgroupRoot, c.opts.CgroupParent+"/"+id); ok {
			st.OOMKilled = n > 0
		} else {
			st.OOMKilled, st.OOMGuessed = true, true
		}
	}
	return st, nil
}

// oomKills is how many processes the memory cgroup path under root (v1 or
// v2) has OOM-killed; false when its counter cannot be read.
func oomKills(root, cgroup string) (int, bool) {
	file, field := filepath.Join(root, "memory", cgroup, "memory.oom_control"), "oom_kill"
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		file = filepath.Join(root, cgroup, "memory.events")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == field {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil
		}
	}
	return 0, false
}

// memoryLimited reports whether container id's bundle sets a memory limit.
func (c *Client) memoryLimited(id string) bool {
	b, err := os.ReadFile(filepath.Join(c.bundle(id), "config.json"))
	if err != nil {
		return false
	}
	var cfg struct {
		Linux struct {
			Resources struct {
				Memory *struct {
					Limit *int64 `json:"limit"`
				} `json:"memory"`
			} `json:"resources"`
		} `json:"linux"`
	}
	return json.Unmarshal(b, &cfg) == nil && cfg.Linux.Resources.Memory != nil && cfg.Linux.Resources.Memory.Limit != nil
}

// Wait implements [sandbox.Runtime] for a sandbox this client started.
func (c *Client) Wait(ctx context.Context, id string) (sandbox.ExitState, error) {
	c.mu.Lock()
	p := c.procs[id]
	c.mu.Unlock()
	if p == nil {
		return sandbox.ExitState{}, fmt.Errorf("wait for container %s: %w (not started by this bridge)", id, sandbox.ErrNotFound)
	}
	select {
	case <-p.done:
		return p.state, p.err
	case <-ctx.Done():
		return sandbox.ExitState{}, ctx.Err()
	}
}

// Kill implements [sandbox.Runtime]: SIGKILL to the sandbox's processes.
// A sandbox that is not running is not an error.
func (c *Client) Kill(ctx context.Context, id string) error {
	if _, err := c.command(ctx, "", nil, "kill", "--all", id, "KILL"); err != nil {
		if st, serr := c.state(ctx, id); errors.Is(serr, sandbox.ErrNotFound) || (serr == nil && st.Status != "running") {
			return nil
		}
		return fmt.Errorf("kill container %s: %w", id, err)
	}
	return nil
}

// Wake sends SIGUSR1 to a restored sandbox's first process (the init
// passes it on), which wakes a parked runner: call it once the run
// folder's relay listener and TokenFile are there.
func (c *Client) Wake(ctx context.Context, id string) error {
	if _, err := c.command(ctx, "", nil, "kill", id, "USR1"); err != nil {
		return fmt.Errorf("wake container %s: %w", id, err)
	}
	return nil
}

// Remove implements [sandbox.Runtime]: runsc delete --force, then its
// cgroup and bundle. A sandbox that is gone is not an error.
func (c *Client) Remove(ctx context.Context, id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("remove container %q: %w", id, sandbox.ErrNotFound)
	}
	if _, err := c.state(ctx, id); err == nil {
		if _, err := c.command(ctx, "", nil, "delete", "--force", id); err != nil {
			return fmt.Errorf("remove container %s: %w", id, err)
		}
	} else if !errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	removeCgroup(c.cgroupRoot, c.opts.CgroupParent+"/"+id)
	c.mu.Lock()
	delete(c.procs, id)
	delete(c.logs, id)
	c.mu.Unlock()
	if err := os.RemoveAll(c.bundle(id)); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

// removeCgroup removes the cgroup path under root (each v1 controller's,
// or v2's one), which runsc leaves when the sandbox was killed. An empty
// cgroup goes with rmdir; one still in use stays.
func removeCgroup(root, cgroup string) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		_ = os.Remove(filepath.Join(root, cgroup))
		return
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(root, e.Name(), cgroup))
	}
}

// Logs implements [sandbox.Runtime]: the tail of the sandbox's stdout and
// stderr, all of it once the sandbox has ended.
func (c *Client) Logs(ctx context.Context, id string, limit int) (string, error) {
	c.mu.Lock()
	log, p := c.logs[id], c.procs[id]
	c.mu.Unlock()
	if log == nil {
		return "", nil
	}
	if p != nil {
		select {
		case <-p.done:
			select {
			case <-log.done:
			case <-time.After(drainWait):
			case <-ctx.Done():
			}
		default:
		}
	}
	return lastLines(log.String(), limit), nil
}

// lastLines is the last limit bytes of s.
func lastLines(s string, limit int) string {
	t := engines.NewLogTail(limit)
	_, _ = t.WriteString(s)
	return t.String()
}

// List implements [sandbox.Runtime]: the bundles' state files, running or not.
func (c *Client) List(_ context.Context, labels map[string]string) ([]sandbox.ContainerInfo, error) {
	entries, err := os.ReadDir(filepath.Join(c.opts.Dir, "bundles"))
	if err != nil {
		return nil, err
	}
	var out []sandbox.ContainerInfo
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(c.opts.Dir, "bundles", e.Name(), "state.json"))
		if err != nil {
			continue // a bundle being written or removed
		}
		var st stateFile
		if json.Unmarshal(b, &st) != nil || st.ID != e.Name() {
			continue
		}
		out = append(out, sandbox.ContainerInfo{ID: st.ID, Labels: st.Labels})
	}
	return engines.MatchLabels(out, labels), nil
}

// Checkpoint writes sandbox id's whole state (its memory, processes and
// files) into the folder dir; the sandbox ends. The runner must be parked
// first (a connected relay fails the checkpoint and kills the sandbox).
// Not --leave-running, which keeps the command in the foreground: to go on,
// Restore the image as another id.
func (c *Client) Checkpoint(ctx context.Context, id, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint container %s: %w", id, err)
	}
	st, err := c.stateOf(id)
	if err != nil {
		return fmt.Errorf("checkpoint container %s: %w", id, err)
	}
	start := time.Now()
	if _, err := c.command(ctx, c.bundle(id), nil, "checkpoint", "--image-path", dir, id); err != nil {
		return fmt.Errorf("checkpoint container %s after %s: %w", id, time.Since(start).Round(time.Millisecond), err)
	}
	// The image the checkpoint is restored on, whatever its tag names by
	// then.
	if st.ImageID != "" {
		if err := os.WriteFile(filepath.Join(dir, checkpointImageFile), []byte(st.ImageID), 0o600); err != nil {
			return fmt.Errorf("checkpoint container %s: %w", id, err)
		}
	}
	return nil
}

// checkpointImageFile, in a checkpoint's folder, holds the id of the image
// of the sandbox it was taken of.
const checkpointImageFile = "bridge-image-id"

// stateOf reads sandbox id's state file.
func (c *Client) stateOf(id string) (stateFile, error) {
	var st stateFile
	b, err := os.ReadFile(filepath.Join(c.bundle(id), "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	return st, err
}

// Restore starts sandbox id from the checkpoint in dir, with a bundle of
// its own from spec: the same image (root file system) and mount
// destinations as the checkpointed one, its own run folder and cgroup.
// Two restores of one checkpoint run side by side (a fork). The runner
// stays parked until Wake.
func (c *Client) Restore(ctx context.Context, id string, spec sandbox.ContainerSpec, dir string) error {
	if b, err := os.ReadFile(filepath.Join(dir, checkpointImageFile)); err == nil && len(b) <= 128 {
		spec.Image = string(b) // the checkpoint's image, not what its tag names now
	}
	if err := c.writeBundle(ctx, id, spec); err != nil {
		return fmt.Errorf("restore container %s: %w", id, err)
	}
	if err := c.launch(ctx, id, "restore", "--image-path", dir, "--bundle", c.bundle(id), "-detach", id); err != nil {
		_ = c.Remove(context.WithoutCancel(ctx), id)
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

var _ sandbox.Checkpointer = (*Client)(nil)

// WriteToken implements [sandbox.Checkpointer] (the function WriteToken).
func (c *Client) WriteToken(runDir, token string) error { return WriteToken(runDir, token) }

// TokenFile implements [sandbox.Checkpointer]: the token file's name in
// the run folder.
func (c *Client) TokenFile() string { return filepath.Base(TokenFile) }

// CheckpointTag implements [sandbox.Checkpointer]: runsc's version and the
// image's id. A checkpoint holds the sandbox's kernel state in that
// version's format and reopens the image's files by path.
func (c *Client) CheckpointTag(ctx context.Context, image string) (string, error) {
	v, err := c.version(ctx)
	if err != nil {
		return "", err
	}
	info, err := c.opts.Images.ImageInfo(ctx, image)
	if err != nil {
		return "", err
	}
	return "runsc " + v + "; image " + info.ID, nil
}

// WriteToken writes token into runDir's token file (TokenFile inside the
// sandbox), readable by the sandbox's user, replacing it whole: what a
// restored runner reads when woken.
func WriteToken(runDir, token string) error {
	tmp, err := os.CreateTemp(runDir, ".token-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(token); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o444); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(runDir, filepath.Base(TokenFile)))
}

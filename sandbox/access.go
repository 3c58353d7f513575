package sandbox

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
)

// rootlessPodmanHint is the way to a container engine that needs no one's
// permission but the user's own.
const rootlessPodmanHint = "use rootless Podman (`systemctl --user enable --now podman.socket`)"

// AccessError is an engine socket this user may not use: connecting to it
// failed with EACCES or EPERM. It wraps ErrEngineDenied, ErrEngineUnreachable
// and the cause.
type AccessError struct {
	Engine string // EnginePodman or EngineDocker: a cluster has no socket
	Socket string // the socket's path
	// Who says who may use the socket, as its owner, group and mode show
	// ("root:docker, mode 0660"); "" when they cannot be read.
	Who string
	// Hint says what would let this user in.
	Hint string
	Err  error
}

// Error is Problem and Hint.
func (e *AccessError) Error() string { return e.Problem() + "; " + e.Hint }

// Problem is what went wrong, without the hint.
func (e *AccessError) Problem() string {
	s := fmt.Sprintf("permission denied on %s: you are not allowed to use this %s engine", e.Socket, engineTitle(e.Engine))
	if e.Who != "" {
		s += " (the socket is " + e.Who + ")"
	}
	return s
}

func (e *AccessError) Unwrap() []error {
	return []error{ErrEngineDenied, ErrEngineUnreachable, e.Err}
}

func engineTitle(engine string) string {
	switch engine {
	case EnginePodman:
		return "Podman"
	case EngineDocker:
		return "Docker"
	}
	return engine
}

// socketAccess is what decides the hint of an AccessError: the socket's
// owner, group and mode, and who this user is.
type socketAccess struct {
	known        bool // the socket could be read; else the fields below are zero
	uid, gid     int
	owner, group string // names, or the numbers when unnamed
	perm         os.FileMode
	self         int // this user's uid
	// member: this user is listed in the socket's group; inSession: the
	// process has the group now (a member who has not logged in again
	// since being added has not).
	member, inSession bool
}

// NewAccessError describes why this user may not use the socket at path,
// and what would let them in, from the socket's owner, group and mode.
func NewAccessError(engine, path string, cause error) *AccessError {
	a := socketAccess{self: os.Getuid()}
	if fi, err := os.Stat(path); err == nil {
		uid, uok := fileOwner(fi)
		gid, gok := fileGroup(fi)
		if uok && gok {
			a.known, a.uid, a.gid, a.perm = true, uid, gid, fi.Mode().Perm()
			a.owner, a.group = strconv.Itoa(uid), strconv.Itoa(gid)
			if u, err := user.LookupId(a.owner); err == nil {
				a.owner = u.Username
			}
			if g, err := user.LookupGroupId(a.group); err == nil {
				a.group = g.Name
			}
			if u, err := user.LookupId(strconv.Itoa(a.self)); err == nil {
				if gids, err := u.GroupIds(); err == nil {
					a.member = slices.Contains(gids, strconv.Itoa(gid))
				}
			}
			if gids, err := os.Getgroups(); err == nil {
				a.inSession = slices.Contains(gids, gid) || os.Getgid() == gid
			}
		}
	}
	who, hint := a.explain(engine, path)
	return &AccessError{Engine: engine, Socket: path, Who: who, Hint: hint, Err: cause}
}

// explain returns the Who and Hint of an AccessError.
func (a socketAccess) explain(engine, path string) (who, hint string) {
	if !a.known {
		// The socket's directory is closed to this user.
		fix := "run the bridge as a user who may open " + path
		if engine == EngineDocker {
			fix = "add yourself to the `docker` group (`sudo usermod -aG docker $USER`, then log in again)"
		}
		return "", fix + ", or " + rootlessPodmanHint
	}
	who = fmt.Sprintf("%s:%s, mode %04o", a.owner, a.group, a.perm)
	groupRW := a.perm&0o060 == 0o060 && a.gid != 0
	modeAllows := a.self == 0 || a.perm&0o006 == 0o006 ||
		(a.uid == a.self && a.perm&0o600 == 0o600) || (groupRW && a.inSession)
	switch {
	case modeAllows:
		return who, "its mode lets you in, so a security module (SELinux, AppArmor) or the service refused you: check the system's audit log"
	case a.uid == a.self:
		return who, fmt.Sprintf("the socket is yours but closed to you: `chmod u+rw %s`, or restart the service that made it", path)
	case groupRW && a.member:
		return who, fmt.Sprintf("you were added to the `%s` group after this session began: log in again (or start a shell with `newgrp %s`)", a.group, a.group)
	case groupRW:
		return who, fmt.Sprintf("add yourself to the `%s` group (`sudo usermod -aG %s $USER`, then log in again), or %s", a.group, a.group, rootlessPodmanHint)
	case a.uid == 0:
		return who + ": root only", rootlessPodmanHint + ", or run the bridge as root"
	}
	return who + ": " + a.owner + "'s only", rootlessPodmanHint + ", or run the bridge as " + a.owner
}

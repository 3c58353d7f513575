package engines

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/bridge-mcp/bridge/internal/paths"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Every container the bridge starts runs under the bridge's own seccomp
// profile, whichever backend starts it and whichever engine answers: the
// Podman backend gives the engine its path; the Docker backend gives
// Docker the profile itself, and Podman's Docker-compatible API (which
// reads the option as a path) its path. The profile refuses what it does
// not list (ENOSYS, so that the C library falls back where it can) and:
//
//   - refuses (EPERM) user namespaces and the kernel's keyrings (unshare,
//     setns, keyctl, add_key, request_key: Podman's own default allows
//     them, for nested containers), mounts (mount, umount2, pivot_root),
//     reboot, and what the engines' defaults refuse a container without
//     capabilities (kexec, modules, bpf, perf_event_open, userfaultfd, ...);
//   - allows clone only without namespace flags (CLONE_NEWNS, NEWCGROUP,
//     NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET), and answers clone3, whose
//     flags seccomp cannot read, with ENOSYS, so that the C library falls
//     back to clone (Docker does the same);
//   - allows personality only for the personas Docker and Podman allow;
//   - allows the rest of what a Linux program needs, the list both engines'
//     defaults share.
//
// The sandbox drops every capability, so the capability-gated rules of the
// engines' own profiles (which allow a call to a container given the
// capability) have no place here.

const (
	// cloneNamespaceFlags are the clone flags that make new namespaces.
	cloneNamespaceFlags = 0x7E020000
	errnoEPERM          = 1
	errnoENOSYS         = 38
)

// seccompDenied are refused with EPERM: the calls an attacker reaches for,
// which a program that meets ENOSYS might otherwise take for an old kernel.
var seccompDenied = []string{
	// namespaces and keyrings
	"unshare", "setns", "keyctl", "add_key", "request_key",
	// mounts and the machine
	"mount", "umount", "umount2", "pivot_root", "reboot", "chroot", "acct",
	"sethostname", "setdomainname", "swapon", "swapoff", "vhangup",
	"settimeofday", "stime", "clock_settime", "clock_settime64",
	// the kernel itself
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"query_module", "bpf", "perf_event_open", "fanotify_init", "lookup_dcookie",
	"quotactl", "open_by_handle_at", "kcmp", "process_madvise", "ioperm", "iopl",
	"userfaultfd", "bdflush", "nfsservctl", "sysfs", "uselib", "ustat", "vm86",
	"vm86old", "pciconfig_iobase", "pciconfig_read", "pciconfig_write",
	"migrate_pages", "move_pages", "vmsplice", "io_pgetevents",
}

// seccompAllowed are allowed without conditions.
var seccompAllowed = []string{
	"_llseek", "_newselect", "accept", "accept4", "access", "adjtimex", "alarm", "bind", "brk",
	"capget", "capset", "chdir", "chmod", "chown", "chown32", "clock_adjtime", "clock_adjtime64",
	"clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
	"clock_nanosleep_time64", "close", "close_range", "connect", "copy_file_range", "creat", "dup",
	"dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve", "execveat",
	"exit", "exit_group", "faccessat", "faccessat2", "fadvise64", "fadvise64_64", "fallocate",
	"fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown", "fchown32", "fchownat", "fcntl",
	"fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr", "fsconfig",
	"fsetxattr", "fsmount", "fsopen", "fspick", "fstat", "fstat64", "fstatat64", "fstatfs",
	"fstatfs64", "fsync", "ftruncate", "ftruncate64", "futex", "futex_time64", "futimesat",
	"get_mempolicy", "get_robust_list", "get_thread_area", "getcpu", "getcwd", "getdents",
	"getdents64", "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32",
	"getgroups", "getgroups32", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid",
	"getppid", "getpriority", "getrandom", "getresgid", "getresgid32", "getresuid", "getresuid32",
	"getrlimit", "getrusage", "getsid", "getsockname", "getsockopt", "gettid", "gettimeofday",
	"getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init", "inotify_init1",
	"inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_setup", "io_submit",
	"ioctl", "ioprio_get", "ioprio_set", "ipc", "kill", "landlock_add_rule",
	"landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32", "lgetxattr", "link",
	"linkat", "listen", "listxattr", "llistxattr", "lremovexattr", "lseek", "lsetxattr", "lstat",
	"lstat64", "madvise", "mbind", "membarrier", "memfd_create", "memfd_secret", "mincore",
	"mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mmap2",
	"mount_setattr", "move_mount", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
	"mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64",
	"mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
	"munlockall", "munmap", "name_to_handle_at", "nanosleep", "newfstatat", "open", "open_tree",
	"openat", "openat2", "pause", "pidfd_getfd", "pidfd_open", "pidfd_send_signal", "pipe",
	"pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
	"pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "process_vm_readv",
	"process_vm_writev", "pselect6", "pselect6_time64", "ptrace", "pwrite64", "pwritev",
	"pwritev2", "read", "readahead", "readdir", "readlink", "readlinkat", "readv", "recv",
	"recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages", "removexattr",
	"rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction",
	"rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
	"rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max",
	"sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
	"sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield",
	"seccomp", "select", "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "send",
	"sendfile", "sendfile64", "sendmmsg", "sendmsg", "sendto", "set_mempolicy", "set_robust_list",
	"set_thread_area", "set_tid_address", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32",
	"setgid", "setgid32", "setgroups", "setgroups32", "setitimer", "setpgid", "setpriority",
	"setregid", "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid",
	"setreuid32", "setrlimit", "setsid", "setsockopt", "setuid", "setuid32", "setxattr", "shmat",
	"shmctl", "shmdt", "shmget", "shutdown", "sigaction", "sigaltstack", "signal", "signalfd",
	"signalfd4", "sigpending", "sigprocmask", "sigreturn", "sigsuspend", "socket", "socketcall",
	"socketpair", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink",
	"symlinkat", "sync", "sync_file_range", "syncfs", "syscall", "sysinfo", "syslog", "tee",
	"tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_gettime64", "timer_settime", "timer_settime64", "timerfd", "timerfd_create",
	"timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
	"tkill", "truncate", "truncate64", "ugetrlimit", "umask", "uname", "unlink", "unlinkat",
	"utime", "utimensat", "utimensat_time64", "utimes", "vfork", "wait4", "waitid", "waitpid",
	"write", "writev",
}

// seccompPersonalities are the personality(2) arguments allowed: the
// default persona, PER_LINUX32, UNAME26 (alone and with PER_LINUX32),
// and the query 0xffffffff.
var seccompPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// seccompArchMap lets a filter for a 64-bit architecture also decide the
// calls of its 32-bit ABIs.
var seccompArchMap = []seccompArch{
	{"SCMP_ARCH_X86_64", []string{"SCMP_ARCH_X86", "SCMP_ARCH_X32"}},
	{"SCMP_ARCH_AARCH64", []string{"SCMP_ARCH_ARM"}},
	{"SCMP_ARCH_S390X", []string{"SCMP_ARCH_S390"}},
	{"SCMP_ARCH_PPC64LE", nil},
	{"SCMP_ARCH_RISCV64", nil},
}

// The profile's JSON, as Docker and Podman read it.
type (
	seccompProfileJSON struct {
		DefaultAction   string        `json:"defaultAction"`
		DefaultErrnoRet int           `json:"defaultErrnoRet"`
		ArchMap         []seccompArch `json:"archMap"`
		Syscalls        []seccompRule `json:"syscalls"`
	}
	seccompArch struct {
		Arch string   `json:"architecture"`
		Sub  []string `json:"subArchitectures"`
	}
	seccompRule struct {
		Names    []string       `json:"names"`
		Action   string         `json:"action"`
		ErrnoRet int            `json:"errnoRet,omitempty"`
		Args     []seccompArg   `json:"args,omitempty"`
		Includes *seccompFilter `json:"includes,omitempty"`
	}
	seccompArg struct {
		Index    uint   `json:"index"`
		Value    uint64 `json:"value"`
		ValueTwo uint64 `json:"valueTwo"`
		Op       string `json:"op"`
	}
	seccompFilter struct {
		Arches []string `json:"arches,omitempty"`
	}
)

// SeccompProfile returns the bridge's own profile, as JSON.
func SeccompProfile() []byte {
	allow := func(names ...string) seccompRule { return seccompRule{Names: names, Action: "SCMP_ACT_ALLOW"} }
	arches := func(r seccompRule, a ...string) seccompRule { r.Includes = &seccompFilter{Arches: a}; return r }
	rules := []seccompRule{
		allow(seccompAllowed...),
		{Names: []string{"clone"}, Action: "SCMP_ACT_ALLOW",
			Args: []seccompArg{{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: "SCMP_CMP_MASKED_EQ"}}},
		{Names: []string{"clone3"}, Action: "SCMP_ACT_ERRNO", ErrnoRet: errnoENOSYS},
		{Names: seccompDenied, Action: "SCMP_ACT_ERRNO", ErrnoRet: errnoEPERM},
		arches(allow("arch_prctl"), "amd64", "x32"),
		arches(allow("modify_ldt"), "amd64", "x32", "x86"),
		arches(allow("arm_fadvise64_64", "arm_sync_file_range", "breakpoint", "cacheflush", "set_tls", "sync_file_range2"), "arm", "arm64"),
		arches(allow("sync_file_range2"), "ppc64le"),
		arches(allow("s390_pci_mmio_read", "s390_pci_mmio_write", "s390_runtime_instr"), "s390", "s390x"),
	}
	for _, p := range seccompPersonalities {
		rules = append(rules, seccompRule{Names: []string{"personality"}, Action: "SCMP_ACT_ALLOW",
			Args: []seccompArg{{Index: 0, Value: p, Op: "SCMP_CMP_EQ"}}})
	}
	b, err := json.MarshalIndent(seccompProfileJSON{
		DefaultAction: "SCMP_ACT_ERRNO", DefaultErrnoRet: errnoENOSYS,
		ArchMap: seccompArchMap, Syscalls: rules,
	}, "", "  ")
	if err != nil {
		panic(err) // the profile is made of constants
	}
	return b
}

// SeccompProfileFile writes the bridge's profile into dir (private to the
// bridge's user; the engine's service, root or this user, reads it) and
// returns its path. The file is named by its content, so every run and
// every bridge of this user shares it.
func SeccompProfileFile(dir string) (string, error) {
	prof := SeccompProfile()
	sum := sha256.Sum256(prof)
	path := filepath.Join(dir, "seccomp-"+hex.EncodeToString(sum[:8])+".json")
	if b, err := os.ReadFile(path); err == nil && string(b) == string(prof) {
		return path, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := paths.EnsurePrivateDir(dir); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".seccomp-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(prof); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("writing the seccomp profile: %w", err)
	}
	return path, os.Rename(tmp.Name(), path)
}

// SeccompFile is the bridge's profile as a file, written on first use and
// again should it go missing, for an engine that reads it by path.
type SeccompFile struct {
	mu   sync.Mutex
	path string
}

// Get returns the file's path.
func (f *SeccompFile) Get() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path != "" {
		if _, err := os.Stat(f.path); err == nil {
			return f.path, nil
		}
	}
	path, err := SeccompProfileFile(sandbox.DefaultRunRoot())
	if err != nil {
		return "", err
	}
	f.path = path
	return path, nil
}

# bridge doctor's smoke test. It runs inside the sandbox like any user code and
# proves the sandbox's properties from the inside, printing one JSON object.
# It runs under runc and under gVisor (runsc) alike: where gVisor shows a
# property differently, it is proved another way.
import ctypes
import errno
import json
import os
import resource
import socket
import subprocess
import sys
import time

checks = {}


def check(name, ok, detail):
    checks[name] = {"ok": bool(ok), "detail": detail}


def read(*paths):
    for p in paths:
        try:
            with open(p) as f:
                return f.read().strip()
        except OSError:
            pass
    return None


libc = ctypes.CDLL(None, use_errno=True)

# The kernel the code talks to. gVisor's log (syslog(2), which the host's
# kernel refuses without CAP_SYSLOG) starts with "Starting gVisor...", and
# its /proc/version names a Linux 4.4.0 of 2016.
buf = ctypes.create_string_buffer(1 << 14)
n = libc.syscall(103, 3, buf, len(buf))  # SYS_syslog, SYSLOG_ACTION_READ_ALL
klog = buf.raw[:n].decode(errors="replace") if n > 0 else ""
version = read("/proc/version") or "?"
gvisor = "Starting gVisor" in klog
kernel = {"gvisor": gvisor, "detail": ("gVisor: " if gvisor else "") + version}


# Network: only the loopback interface exists, and a UDP connect (which sends
# no packet) finds no route. 192.0.2.1 is TEST-NET-1, reserved for docs.
ifaces = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("192.0.2.1", 9))
    route = "a route exists"
except OSError as e:
    route = errno.errorcode.get(e.errno, str(e.errno))
# Where the engine gives every container an interface (a Kubernetes pod),
# the runner refuses IP and packet sockets instead: no way onto it.
refused = []
probes = ((socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM), (17, socket.SOCK_RAW),
          (40, socket.SOCK_STREAM), (43, socket.SOCK_STREAM))  # packet, vsock, smc
for fam, kind in probes:
    try:
        socket.socket(fam, kind).close()
    except OSError as e:
        if e.errno == errno.EPERM:
            refused.append(fam)
no_ip = len(refused) == len(probes)
check("network", (ifaces in ([], ["lo"]) and route in ("ENETUNREACH", "EHOSTUNREACH")) or no_ip,
      f"interfaces {ifaces}, connect: {route}" + ("; IP, packet, vsock and SMC sockets refused" if no_ip else ""))

# Read-only root: no write succeeds, and one fails for that reason. gVisor
# checks the permissions of / (EACCES for uid 65534) before the mount, so
# /var/tmp, writable by anyone in the image, is tried too.
writes = []
for probe in ("/bridge-doctor-probe", "/var/tmp/bridge-doctor-probe"):
    try:
        open(probe, "w").close()
        os.remove(probe)
        writes.append(f"writing {os.path.dirname(probe)}: succeeded")
    except OSError as e:
        writes.append(f"writing {os.path.dirname(probe)}: " + errno.errorcode.get(e.errno, str(e.errno)))
check("read_only_root", not any(w.endswith("succeeded") for w in writes) and any(w.endswith("EROFS") for w in writes),
      ", ".join(writes))

# Identity.
check("uid", os.getuid() == 65534 and os.getgid() == 65534 and os.geteuid() == 65534,
      f"uid {os.getuid()} gid {os.getgid()} groups {os.getgroups()}")

status = {}
with open("/proc/self/status") as f:
    for line in f:
        k, _, v = line.partition(":")
        status[k] = v.strip()
caps = {k: int(status.get(k, "0"), 16) for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb")}
check("capabilities", caps["CapEff"] == 0 and caps["CapPrm"] == 0 and caps["CapAmb"] == 0,
      " ".join(f"{k} {v:016x}" for k, v in caps.items()))
# prctl(PR_GET_NO_NEW_PRIVS): gVisor's /proc/self/status has no NoNewPrivs line.
nnp = libc.prctl(39, 0, 0, 0, 0)
check("no_new_privs", nnp == 1 and status.get("NoNewPrivs", "1") == "1",
      f"prctl {nnp}, NoNewPrivs " + status.get("NoNewPrivs", "(not shown)"))

# The seccomp profile: no user namespace (which would give the code every
# capability over namespaces of its own) and no kernel keyrings (which are
# not namespaced). Tried in a forked child: unshare needs one thread. Under
# gVisor these calls reach gVisor's kernel, not the host's.
NR = {"x86_64": {"unshare": 272, "keyctl": 250}, "aarch64": {"unshare": 97, "keyctl": 219}}.get(os.uname().machine)
if NR is None:
    check("seccomp", gvisor, f"not tried on {os.uname().machine}")
else:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        got = []
        for name, args in (("unshare", (0x10000000,)), ("keyctl", (0, -3, 1))):  # CLONE_NEWUSER; the session keyring
            rc = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
            e = ctypes.get_errno()
            got.append(f"{name}: " + ("allowed" if rc != -1 else errno.errorcode.get(e, str(e))))
        os.write(w, ", ".join(got).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    seccomp = os.read(r, 4096).decode()
    os.close(r)
    refused = seccomp.count(": E") == 2
    check("seccomp", refused or gvisor, seccomp + ("" if refused or not gvisor else " (gVisor's own kernel, not the host's)"))

# The runner's own confinement: the code can make no unix socket (so it
# cannot connect to one in a mounted folder), and where the kernel has
# Landlock it opens no file for writing outside /tmp and /dev (so
# no FIFO in a mounted folder).
try:
    socket.socket(socket.AF_UNIX).close()
    unix = "allowed"
except OSError as e:
    unix = errno.errorcode.get(e.errno, str(e.errno))
libc.syscall.restype = ctypes.c_long
landlock = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(..., LANDLOCK_CREATE_RULESET_VERSION)
check("unix_sockets", unix == "EPERM", f"socket(AF_UNIX): {unix}; Landlock: " +
      (f"ABI {landlock}" if landlock > 0 else "none (FIFOs in mounts are refused when the policy is read and when a container is made)"))

# /tmp: the only writable place; noexec, nosuid, nodev. gVisor lists only
# noexec of these (nosuid and nodev change nothing for code without
# capabilities and with no_new_privs); noexec is also proved by running a
# script from there.
opts = ""
with open("/proc/self/mounts") as f:
    for line in f:
        parts = line.split()
        if len(parts) > 3 and parts[1] == "/tmp":
            opts = parts[2] + " " + parts[3]
try:
    with open("/tmp/probe", "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod("/tmp/probe", 0o755)
    writable = True
    try:
        subprocess.run(["/tmp/probe"], check=False)
        ran = "ran"
    except OSError as e:
        ran = errno.errorcode.get(e.errno, str(e.errno))
    os.remove("/tmp/probe")
except OSError:
    writable, ran = False, "-"
flags = set(opts.replace(" ", ",").split(","))
need = {"noexec"} if gvisor else {"noexec", "nosuid", "nodev"}
check("tmpfs", writable and opts.startswith("tmpfs") and need <= flags and ran == "EACCES",
      ("writable, " if writable else "not writable, ") + (opts or "no mount") + f"; exec: {ran}")


def ran_fraction(wall=0.6, gap=0.004):
    """The share of wall time a busy loop got: a CPU quota below one core
    shows as pauses of the loop (at 0.5 cores, 50 ms of every 100 ms)."""
    t0 = last = time.monotonic()
    stalled = 0.0
    while last - t0 < wall:
        now = time.monotonic()
        if now - last > gap:
            stalled += now - last
        last = now
    return 1 - stalled / (last - t0)


if gvisor:
    # gVisor shows no cgroup files. It sizes its memory to the cgroup's
    # limit, counts RLIMIT_NPROC in its own kernel (the bridge sets it to the
    # pids limit), and the CPU quota shows as pauses.
    meminfo = read("/proc/meminfo") or ""
    total = next((line.split()[1] for line in meminfo.splitlines() if line.startswith("MemTotal:")), None)
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    limits = {"source": "gvisor", "memory": str(int(total) * 1024) if total else None,
              "pids": str(soft) if soft == hard else f"{soft} (hard {hard})",
              "cpu": f"{ran_fraction():.2f}"}
else:
    # Limits, as the kernel applies them to this container's cgroup.
    mem = read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
    pids = read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")
    cpu = read("/sys/fs/cgroup/cpu.max")
    if cpu is None:
        q = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
        p = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")
        cpu = f"{q} {p}" if q is not None else None
    limits = {"source": "cgroup", "memory": mem, "pids": pids, "cpu": cpu}


def packages():
    """The notable packages the image holds, with their versions (the
    data-science variant's: doctor.NotablePackages), then every distribution
    pip installed under /usr/local (`bridge image build --wheels`). Absent
    ones are not listed."""
    try:
        from importlib import metadata
    except ImportError:
        return []
    out = []
    for name in ("numpy", "pandas", "matplotlib", "scipy", "scikit-learn", "Pillow", "openpyxl", "tabulate", "Jinja2"):
        try:
            out.append({"name": name, "version": metadata.version(name)})
        except Exception:
            pass
    local = [p for p in sys.path if p.startswith("/usr/local/lib/") and os.path.isdir(p)]
    wheels = {}
    for dist in metadata.distributions(path=local):
        name = dist.metadata["Name"]
        if name and name not in wheels:
            wheels[name] = dist.version
    out += [{"name": n, "version": v, "wheel": True} for n, v in sorted(wheels.items(), key=lambda kv: kv[0].lower())]
    return out


print(json.dumps({"checks": checks, "limits": limits, "kernel": kernel, "python": sys.version.split()[0],
                  "packages": packages()}))

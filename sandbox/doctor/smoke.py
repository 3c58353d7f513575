# bridge doctor's smoke test. It runs inside the sandbox like any user code and
# proves the sandbox's properties from the inside, printing one JSON object.
import errno
import json
import os
import socket
import sys

checks = {}


def check(name, ok, detail):
    checks[name] = {"ok": bool(ok), "detail": detail}


# Network: only the loopback interface exists, and a UDP connect (which sends
# no packet) finds no route. 192.0.2.1 is TEST-NET-1, reserved for docs.
ifaces = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("192.0.2.1", 9))
    route = "a route exists"
except OSError as e:
    route = errno.errorcode.get(e.errno, str(e.errno))
check("network", ifaces in ([], ["lo"]) and route == "ENETUNREACH",
      f"interfaces {ifaces}, connect: {route}")

# Read-only root.
try:
    open("/bridge-doctor-probe", "w").close()
    check("read_only_root", False, "writing / succeeded")
except OSError as e:
    check("read_only_root", e.errno == errno.EROFS, "writing /: " + errno.errorcode.get(e.errno, str(e.errno)))

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
check("no_new_privs", status.get("NoNewPrivs") == "1", "NoNewPrivs " + status.get("NoNewPrivs", "?"))

# /tmp: the only writable place; noexec, nosuid, nodev.
opts = ""
with open("/proc/self/mounts") as f:
    for line in f:
        parts = line.split()
        if len(parts) > 3 and parts[1] == "/tmp":
            opts = parts[0] + " " + parts[3]
try:
    with open("/tmp/probe", "w") as f:
        f.write("x")
    os.remove("/tmp/probe")
    writable = True
except OSError:
    writable = False
flags = set(opts.replace(" ", ",").split(","))
check("tmpfs", writable and opts.startswith("tmpfs") and {"noexec", "nosuid", "nodev"} <= flags,
      ("writable, " if writable else "not writable, ") + (opts or "no mount"))


def read(*paths):
    for p in paths:
        try:
            with open(p) as f:
                return f.read().strip()
        except OSError:
            pass
    return None


# Limits, as the kernel applies them to this container's cgroup.
mem = read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
pids = read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")
cpu = read("/sys/fs/cgroup/cpu.max")
if cpu is None:
    q = read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
    p = read("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")
    cpu = f"{q} {p}" if q is not None else None
print(json.dumps({"checks": checks, "limits": {"memory": mem, "pids": pids, "cpu": cpu},
                  "python": sys.version.split()[0]}))

# gvisor_net: the network side of the gvisor runtime plugin (plugins/runtime/gvisor): the
# namespace spaced's net/ made for a sandbox (checked, read, given back the addresses runsc
# took), runsc's view of /proc/sys/net, and the sandbox's TCP flows as the host's connection
# tracking shows them (a checkpoint is tried only without any). Standard library only;
# imported by the plugin, never run.
import ctypes
import json
import os
import subprocess


class PluginError(Exception):
    # A structured error of the contract (docs/runtime-plugins.md): code and message.
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS, MS_REC, MS_SLAVE = 0x00020000, 16384, 1 << 19


def hide_sysctl_net():
    # preexec_fn of runsc with --network=sandbox. Before it takes a namespace's devices,
    # this runsc checks that the namespace is not the host's by /proc/sys/net/core/
    # rmem_default being absent, which it was outside the root namespace on older kernels;
    # newer ones (6.x) show it everywhere, and runsc refuses every namespace. Its view of
    # /proc/sys/net is hidden in a mount namespace of its own (host mounts still propagate
    # in); the sandbox's own /proc is gVisor's. check_netns does the check instead.
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if _libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None) != 0:
        raise OSError(ctypes.get_errno(), "make / a slave mount")
    if _libc.mount(b"space-gvisor", b"/proc/sys/net", b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                   b"size=4k,mode=555") != 0:
        raise OSError(ctypes.get_errno(), "hide /proc/sys/net")


def check_netns(path):
    if not isinstance(path, str) or not path.startswith("/"):
        raise PluginError("invalid_argument", "a networked sandbox needs its namespace's path (netns_path)")
    try:
        st = os.stat(path)
    except OSError as e:
        raise PluginError("invalid_argument", "network namespace %s: %s" % (path, e.strerror))
    for host in ("/proc/1/ns/net", "/proc/self/ns/net"):
        try:
            h = os.stat(host)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (h.st_dev, h.st_ino):
            raise PluginError("invalid_argument", "%s is the host's network namespace" % path)


def in_netns(path, argv, input=None):
    p = subprocess.run(["nsenter", "--net=" + path] + argv, input=input, capture_output=True,
                       text=True, timeout=20)
    if p.returncode != 0:
        raise PluginError("invalid_argument", "network namespace %s: %s: %s" %
                          (path, " ".join(argv[:3]), (p.stderr or p.stdout).strip()[-300:]))
    return p.stdout


def netns_config(path):
    # The IPv4 addresses of every device but lo, and the routes through a gateway.
    addrs, routes = [], []
    for link in json.loads(in_netns(path, ["ip", "-j", "-4", "addr", "show"]) or "[]"):
        if link.get("ifname") == "lo":
            continue
        for a in link.get("addr_info") or []:
            if a.get("family") == "inet" and a.get("local"):
                addrs.append({"dev": link["ifname"], "addr": "%s/%d" % (a["local"], a.get("prefixlen", 32))})
    for r in json.loads(in_netns(path, ["ip", "-j", "-4", "route", "show"]) or "[]"):
        if r.get("gateway") and r.get("dev"):
            routes.append({"dst": r.get("dst", "default"), "gateway": r["gateway"], "dev": r["dev"]})
    return {"addrs": addrs, "routes": routes}


def netns_restore(path, cfg):
    cmds = ["addr replace %s dev %s" % (a["addr"], a["dev"]) for a in cfg.get("addrs") or []]
    cmds += ["route replace %s via %s dev %s" % (r["dst"], r["gateway"], r["dev"]) for r in cfg.get("routes") or []]
    for c in cmds:
        if not all(is_ip_word(w) for w in c.split()):
            raise PluginError("internal", "bad network record: %r" % c)
    in_netns(path, ["ip", "-batch", "-"], input="\n".join(cmds) + "\n")


def is_ip_word(w):
    return 0 < len(w) <= 64 and all(c.isascii() and (c.isalnum() or c in "./:-_") for c in w)


# gVisor's netstack keeps a closed TCP endpoint this long (tcp.DefaultTCPTimeWaitTimeout).
TCP_TIMEWAIT_S = 60
CONNTRACK = "/proc/net/nf_conntrack"


def sandbox_ip(rec):
    for a in (rec.get("net_config") or {}).get("addrs") or []:
        return a["addr"].split("/")[0]
    return None


def conntrack_tcp(ip):
    # (key, state, seconds left) of the host's tracked TCP flows from or to `ip`.
    out = []
    with open(CONNTRACK) as f:
        for line in f:
            w = line.split()
            if len(w) < 8 or w[2] != "tcp" or ("src=" + ip) not in w and ("dst=" + ip) not in w:
                continue
            kv = {}
            for t in w[6:]:
                k, _, v = t.partition("=")
                kv.setdefault(k, v)  # the first tuple: the flow as the sandbox side opened it
            if ip not in (kv.get("src"), kv.get("dst")):
                continue
            key = "%s:%s>%s:%s" % (kv.get("src"), kv.get("sport"), kv.get("dst"), kv.get("dport"))
            out.append((key, w[5], int(w[4]) if w[4].isdigit() else 0))
    return out


def flow_keys(ip):
    return {k for k, _, _ in conntrack_tcp(ip)} if ip else set()


def tcp_flows(ip, baseline):
    # (still closing, open) flows of the sandbox. The host tracks a closed flow in TIME_WAIT
    # for its own timeout from the last segment, about when the sandbox's side entered
    # TIME_WAIT: the sandbox's is over once fewer than (timeout - TCP_TIMEWAIT_S) seconds are
    # left. CLOSE (after a reset) holds nothing in the sandbox.
    try:
        tw = int(open("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_time_wait").read())
    except (OSError, ValueError):
        tw = 120
    waiting, open_ = [], []
    for key, state, left in conntrack_tcp(ip):
        if key in baseline or state == "CLOSE":
            continue
        if state == "TIME_WAIT":
            if left > tw - TCP_TIMEWAIT_S - 3:
                waiting.append("%s %s" % (key, state))
        elif state == "ESTABLISHED":
            open_.append("%s %s" % (key, state))
        else:
            waiting.append("%s %s" % (key, state))
    return waiting, open_


def tcp_blocker(text):
    # runsc checkpoint's refusal: "... closed:true ...: save rejected due to unsupported
    # networking state: endpoint cannot be saved in connected state: local A, remote B".
    # (local, remote, closed by the sandbox) of the last one, or None.
    key = "endpoint cannot be saved in connected state: local "
    at = text.rfind(key)
    if at < 0:
        return None
    rest = text[at + len(key):].split("\n", 1)[0]
    local, _, remote = rest.partition(", remote ")
    line_start = text.rfind("\n", 0, at) + 1
    closed = "closed:true" in text[line_start:at]
    return local.strip(), remote.strip().rstrip(":"), closed

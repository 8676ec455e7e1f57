#!/usr/bin/env python3
"""The bad-input catalogue: one table row per bad input, each asserting what
it gets - a clear message naming the problem, a non-zero exit where the
program ends, no sanitizer report, no hang past 5 s - and, for abuse of a
running node and for faults, that the cluster's data is intact afterwards
(loco-probe writes a pattern to a memory node before, checks it after).

usage: catalogue.py BUILD_DIR [CASE-NAME-SUBSTRING]
Prints one line per case and "N cases, N failed"; exit 0 if none failed."""
import hashlib, hmac, os, random, select, shutil, signal, socket, struct
import subprocess
import sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                "..", "common"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)),
                                "..", "..", "tools", "lib"))
import skip  # noqa: E402
from ports import free_ports  # noqa: E402

# Sanitizer builds run several times slower: tools/run-tests --sanitize sets
# LOCO_TIMEOUT_SCALE, which stretches the hang limit too.
HANG_S = 5.0 * max(1.0, float(os.environ.get("LOCO_TIMEOUT_SCALE") or 1))
START_S = 6 * HANG_S
B = sys.argv[1]
ONLY = sys.argv[2] if len(sys.argv) > 2 else ""
MEMNODE = os.path.join(B, "tools/memnode/loco-memnode")
PROBE = os.path.join(B, "test/badinput/loco-probe")
LINCHECK = os.path.join(B, "tools/lincheck/loco-lincheck")
APPS = sorted(os.path.join(B, "apps", d, f)
              for d in os.listdir(os.path.join(B, "apps"))
              if os.path.isdir(os.path.join(B, "apps", d))
              for f in os.listdir(os.path.join(B, "apps", d))
              if f.startswith("loco-") and
              os.path.isfile(os.path.join(B, "apps", d, f)) and
              os.access(os.path.join(B, "apps", d, f), os.X_OK))
SAN = ("Sanitizer", "runtime error:", "AddressSanitizer", "ThreadSanitizer")
TMP = tempfile.mkdtemp(prefix="loco-badinput-")
results = []
ucx_not_run = []    # [True] when this build has no ucx transport


def path(name, data=None, mode=0o600):
    p = os.path.join(TMP, name)
    if data is not None:
        with open(p, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.chmod(p, mode)
    return p


KEY = path("cluster.key", os.urandom(32))


def env(**kw):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LOCO_")}
    e["LOCO_RUN_DIR"] = path("run")
    e["LOCO_CLUSTER_KEY"] = KEY
    e.update(kw)
    return {k: v for k, v in e.items() if v is not None}


def run(argv, e=None, timeout=HANG_S):
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=e or env(), stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace"), \
            time.monotonic() - t0
    except subprocess.TimeoutExpired as x:
        out = (x.stdout or b"") + (x.stderr or b"")
        return None, out.decode("utf-8", "replace"), timeout


def record(name, ok, why):
    results.append((name, ok))
    print("%-44s %s%s" % (name, "ok" if ok else "FAILED", "" if ok else
                          ": " + why), flush=True)


def expect_fail(name, argv, says, e=None, rc_want=None):
    """A program that must end non-zero, within 5 s, saying SAYS."""
    if ONLY not in name:
        return
    rc, out, _ = run(argv, e)
    if rc is None:
        return record(name, False, "still running after %g s" % HANG_S)
    if rc == 0 or (rc_want is not None and rc != rc_want):
        return record(name, False, "exit %s: %s" % (rc, out[-300:]))
    if any(s in out for s in SAN):
        return record(name, False, "sanitizer report: " + out[-500:])
    if says.lower() not in out.lower():
        return record(name, False, "no '%s' in: %s" % (says, out[-400:]))
    record(name, True, "")


# ---- a running cluster: memory node 0, compute ids 1 and 2 -------------------

class Cluster:
    def __init__(self, key=KEY, **extra):
        self.ports = free_ports(3)
        self.hosts = path("hosts-%d" % self.ports[0],
                          "0 127.0.0.1:%d memory\n1 127.0.0.1:%d compute\n"
                          "2 127.0.0.1:%d compute\n" % tuple(self.ports))
        self.log = open(path("memnode-%d.log" % self.ports[0]), "w+b")
        self.e = env(LOCO_HOSTS=self.hosts, LOCO_CLUSTER_KEY=key,
                     LOCO_RUN_DIR=path("run-%d" % self.ports[0]), **extra)
        self.mem = subprocess.Popen([MEMNODE, "--id", "0"], env=self.e,
                                    stdin=subprocess.DEVNULL,
                                    stdout=self.log, stderr=self.log)
        self.seed = random.randrange(1, 2**40)

    def probe(self, what, node=1, timeout_ms=3000, args=(), hang=HANG_S,
              **extra):
        return run([PROBE, "--id", str(node), "--timeout-ms", str(timeout_ms),
                    what, str(self.seed)] + list(args), dict(self.e, **extra),
                   hang)

    def started(self, node=1):
        """The first write of a fresh (or restarted) memory node: START_S is
        only an upper bound for its start (a ucx node under
        MALLOC_PERTURB_ on a loaded host took 6-10 s to listen); the probe
        returns as soon as the write is done."""
        return self.probe("write", node=node, timeout_ms=int(START_S * 1000),
                          hang=START_S + HANG_S)

    def memlog(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def stop(self):
        if self.mem.poll() is None:
            self.mem.send_signal(signal.SIGTERM)
            try:
                self.mem.wait(5)
            except subprocess.TimeoutExpired:
                self.mem.kill()
                self.mem.wait()
        self.log.close()


def abuse(name, cl, act, says_in_log=None):
    """ACT abuses node 0 of CL; then the data must be intact, the node alive,
    and no sanitizer report in its log."""
    if ONLY not in name:
        return
    t0 = time.monotonic()
    try:
        why = act(cl)
    except Exception as x:          # a refused connection is fine, a hang not
        why = "%s: %s" % (type(x).__name__, x)
    if why:
        return record(name, False, why)
    if time.monotonic() - t0 > HANG_S + 2:
        return record(name, False, "took %.1f s" % (time.monotonic() - t0))
    rc, out, _ = cl.probe("check")
    if rc != 0:
        return record(name, False, "data not intact afterwards: " + out[-300:])
    if cl.mem.poll() is not None:
        return record(name, False, "memory node died")
    log = cl.memlog()
    if any(s in log for s in SAN):
        return record(name, False, "sanitizer report: " + log[-500:])
    if says_in_log and says_in_log not in log:
        return record(name, False, "memory node log lacks '%s'" % says_in_log)
    record(name, True, "")


def conn(cl):
    s = socket.create_connection(("127.0.0.1", cl.ports[0]), timeout=HANG_S)
    return s


def closed_within(s, limit=HANG_S):
    """'' once the node closes S (reading what it sends), else a reason."""
    s.settimeout(0.2)
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            if not s.recv(4096):
                s.close()
                return ""
        except socket.timeout:
            continue
        except ConnectionResetError:
            s.close()
            return ""
    s.close()
    return "connection still open after %g s" % limit


def hdr(t, n, ver=5):
    return struct.pack("<IHHII", 0x4F434F4C, ver, t, n, 0)


def b16(x):
    return struct.pack("<H", len(x)) + x


def act_random(cl):
    s = conn(cl)
    s.sendall(os.urandom(300))
    return closed_within(s)


def act_huge_len(cl):
    s = conn(cl)
    s.sendall(hdr(9, 0xFFFFFFFF))
    return closed_within(s)


def act_truncated(cl):
    s = conn(cl)
    s.sendall(hdr(9, 36)[:9])
    return closed_within(s)


def act_silent(cl):
    return closed_within(conn(cl))


def act_200(cl):
    socks = [conn(cl) for _ in range(200)]
    rc, out, _ = cl.probe("check")          # served meanwhile
    if rc != 0:
        return "a member was not served during the flood: " + out[-200:]
    for s in socks:
        why = closed_within(s)
        if why:
            return why
    return ""

def held(pid):
    """(open fds, threads, RSS in KiB) of process PID."""
    fds = len(os.listdir("/proc/%d/fd" % pid))
    threads = len(os.listdir("/proc/%d/task" % pid))
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return fds, threads, rss


def holds_nothing(cl, base):
    """'' once node 0 is back to BASE's fds and threads (its RSS at most
    4 MiB above: 200 connections of 4 KiB each stay far below), else why."""
    end = time.monotonic() + 3
    while True:
        now = held(cl.mem.pid)
        if now[0] <= base[0] and now[1] <= base[1] and now[2] <= base[2] + 4096:
            return ""
        if time.monotonic() > end:
            return ("after the abuse: %d fds, %d threads, %d KiB RSS; "
                    "before: %d, %d, %d" % (now + base))
        time.sleep(0.1)


def auth(cl, key, cid=1):
    """The AUTH exchange with KEY as node CID: (socket, status of the ACK)."""
    s = conn(cl)
    nc = os.urandom(32)
    s.sendall(hdr(9, 38) + struct.pack("<I", cid) + b16(nc))
    h = s.recv(16, socket.MSG_WAITALL)
    ln = struct.unpack("<IHHII", h)[3]
    body = s.recv(ln, socket.MSG_WAITALL)
    status = struct.unpack("<I", body[:4])[0]
    if status:
        return s, status
    mlen = struct.unpack("<H", body[4:6])[0]
    at = 6 + mlen
    sid = struct.unpack("<I", body[at:at + 4])[0]
    ns = body[at + 6:at + 38]
    ids = struct.pack("<II", cid, sid)
    proof = hmac.new(key, b"loco-auth-proof-v1" + b"C" + ids + nc + ns,
                     hashlib.sha256).digest()
    s.sendall(hdr(11, 34) + b16(proof))
    h = s.recv(16, socket.MSG_WAITALL)
    body = s.recv(struct.unpack("<IHHII", h)[3], socket.MSG_WAITALL)
    return s, struct.unpack("<I", body[:4])[0]


def act_wrong_key(cl):
    t0 = time.monotonic()
    s, status = auth(cl, os.urandom(32))
    if status == 0:
        return "a wrong key was accepted"
    why = closed_within(s, 1.0)
    if why:
        return why
    if time.monotonic() - t0 > 1.0:
        return "refusal took %.2f s" % (time.monotonic() - t0)
    return ""


def act_right_key(cl):
    """Control: the same exchange with the real key is accepted."""
    with open(KEY, "rb") as f:
        s, status = auth(cl, f.read(), cid=2)
    s.close()
    return "" if status == 0 else "the right key was refused (%d)" % status


def act_hello_unauth(cl):
    s = conn(cl)
    hello = struct.pack("<I", 1) + b16(b"shm") + struct.pack("<QQ", 1 << 20, 0) \
        + b16(b"x" * 40) + struct.pack("<IQQ", 0, 1, 0)
    s.sendall(hdr(1, len(hello)) + hello)
    h = s.recv(16, socket.MSG_WAITALL)
    ln = struct.unpack("<IHHII", h)[3]
    body = s.recv(ln, socket.MSG_WAITALL)
    if struct.unpack("<I", body[:4])[0] == 0:
        return "HELLO without the key was answered"
    if len(body) != 6 + struct.unpack("<H", body[4:6])[0]:
        return "the refusal carries more than a status and a message"
    return closed_within(s)


def act_old_version(cl):
    s = conn(cl)
    s.sendall(hdr(9, 0, ver=2))
    return closed_within(s)


def act_wrong_key_node(cl):
    """A whole node with another cluster's key: it fails, saying so."""
    other = path("other.key", os.urandom(32))
    e = dict(cl.e, LOCO_CLUSTER_KEY=other)
    rc, out, t = run([PROBE, "--id", "2", "--timeout-ms", "3000", "check",
                      "1"], e)
    if rc in (None, 0):
        return "a node with another key: exit %s" % rc
    if "cluster key" not in out:
        return "no clear message: " + out[-300:]
    return ""


# ---- the table ---------------------------------------------------------------

def hosts_cases():
    p = free_ports(2)
    good = "0 127.0.0.1:%d memory\n1 127.0.0.1:%d compute\n" % tuple(p)
    rows = [
        ("hosts: duplicate id", "0 127.0.0.1:1 memory\n0 127.0.0.1:2 compute\n",
         "duplicate node id 0"),
        ("hosts: id out of range", "64 127.0.0.1:1 memory\n", "out of range"),
        ("hosts: negative id", "-1 127.0.0.1:1 memory\n", "-1"),
        ("hosts: port 0", "0 127.0.0.1:0 memory\n", "port"),
        ("hosts: port 65536", "0 127.0.0.1:65536 memory\n", "port"),
        ("hosts: no port", "0 127.0.0.1 memory\n", "port"),
        ("hosts: unknown role", "0 127.0.0.1:1 storage\n", "storage"),
        ("hosts: binary", "\x00\xff\xfe garbage\x01\n", "NUL byte"),
        ("hosts: empty", "", "no nodes defined"),
        ("hosts: duplicate address", "0 127.0.0.1:5 memory\n"
         "1 127.0.0.1:5 compute\n", "address 127.0.0.1:5 is node 0's already"),
        ("hosts: unknown setting", "0 127.0.0.1:5 memory mtu2=7\n", "mtu2"),
        ("hosts: id not in file", good.replace("0 127", "3 127"),
         "node id 0 is not in the file"),
    ]
    for name, text, says in rows:
        expect_fail(name, [MEMNODE, "--id", "0", "--hosts",
                           path("h-" + name.split(": ")[1].replace(" ", "_"),
                                text)], says)
    expect_fail("hosts: missing file", [MEMNODE, "--id", "0", "--hosts",
                                        path("nonexistent")], "cannot open")
    expect_fail("hosts: a directory", [MEMNODE, "--id", "0", "--hosts", TMP],
                TMP)
    # CRLF line ends are accepted: the node runs (and is stopped by us).
    if ONLY in "hosts: CRLF accepted":
        h = path("h-crlf", good.replace("\n", "\r\n"))
        e = env(LOCO_HOSTS=h)
        m = subprocess.Popen([MEMNODE, "--id", "0"], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        rc, out, _ = run([PROBE, "--id", "1", "write", "5"], e)
        m.send_signal(signal.SIGTERM)
        m.wait(5)
        record("hosts: CRLF accepted", rc == 0, out[-300:])


def key_cases():
    h = path("h-key", "0 127.0.0.1:%d memory\n" % free_ports(1)[0])
    base = [MEMNODE, "--id", "0", "--hosts", h]
    expect_fail("key: none and not --insecure", base, "no cluster key",
                env(LOCO_CLUSTER_KEY=None))
    expect_fail("key: mode 0644", base + ["--cluster-key",
                path("k644", os.urandom(32), 0o644)], "mode 0644")
    expect_fail("key: 31 bytes", base + ["--cluster-key",
                path("k31", os.urandom(31))], "exactly 32 bytes")
    expect_fail("key: missing file", base + ["--cluster-key",
                path("knone")], "cannot open the cluster key")
    expect_fail("key: LOCO_INSECURE=yes", base, "expected 1 or 0",
                env(LOCO_INSECURE="yes"))


def durable_cases():
    """loco-memnode --durable: bad directories and companions of --durable."""
    h = path("h-dur", "0 127.0.0.1:%d memory\n" % free_ports(1)[0])
    base = [MEMNODE, "--id", "0", "--hosts", h]
    expect_fail("durable: --power-cut without --durable",
                base + ["--power-cut"], "needs a durable directory",
                rc_want=2)
    expect_fail("durable: LOCO_POWER_CUT=yes", base, "expected 1 or 0",
                env(LOCO_POWER_CUT="yes"), rc_want=2)
    expect_fail("durable: DIR is a file", base + ["--durable",
                path("dur-file", b"x")], "not a directory")
    bad = path("dur-table")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "regions"), "wb") as f:
        f.write(os.urandom(64))
    expect_fail("durable: damaged region table", base + ["--durable", bad],
                "region table")
    expect_fail("durable: LOCO_DURABLE_SYNC=often", base + ["--durable",
                path("dur-sync")], "LOCO_DURABLE_SYNC",
                env(LOCO_DURABLE_SYNC="often"))
    expect_fail("durable: LOCO_DURABLE_SYNCS=9", base + ["--durable",
                path("dur-syncs")], "LOCO_DURABLE_SYNCS",
                env(LOCO_DURABLE_SYNCS="9"))
    p = free_ports(3)
    hm = path("h-mirror", "0 127.0.0.1:%d memory\n1 127.0.0.1:%d mirror\n"
              "2 127.0.0.1:%d compute\n" % tuple(p))
    mbase = [MEMNODE, "--hosts", hm]
    expect_fail("mirror: --mirror-of without --durable",
                mbase + ["--id", "1", "--mirror-of", "0"],
                "needs a durable directory", rc_want=2)
    expect_fail("mirror: --mirror-of x", mbase + ["--id", "1", "--mirror-of",
                "x"], "bad node id", rc_want=2)
    expect_fail("mirror: role mirror without --mirror-of",
                mbase + ["--id", "1", "--durable", path("dur-m1")],
                "start it with --mirror-of")
    expect_fail("mirror: of a compute node", mbase + ["--id", "1",
                "--durable", path("dur-m2"), "--mirror-of", "2"],
                "not a memory node")
    expect_fail("mirror: a memory node given --mirror-of", mbase + ["--id",
                "0", "--durable", path("dur-m3"), "--mirror-of", "0"],
                "its role is not mirror")


# Programs that run a private cluster of their own in one process and
# take no node options.
PRIVATE_CLUSTER = ("loco-fencebench",)


def option_cases():
    h = path("h-opt", "0 127.0.0.1:%d memory\n1 127.0.0.1:%d compute\n"
             % tuple(free_ports(2)))
    e = env(LOCO_HOSTS=h, LOCO_NODE_ID="1")
    for prog in APPS + [MEMNODE, PROBE]:
        n = os.path.basename(prog)
        if n in PRIVATE_CLUSTER:
            # A private cluster in one process: no node options; a bad
            # argument is a usage error.
            expect_fail("options: %s --id -1" % n, [prog, "--id", "-1"],
                        "usage: " + n, e, rc_want=2)
            expect_fail("options: %s 9" % n, [prog, "9"], "usage: " + n, e,
                        rc_want=2)
            continue
        expect_fail("options: %s --id -1" % n, [prog, "--id", "-1"],
                    "bad node id", e, rc_want=2)
        expect_fail("options: %s --arena-mb 0" % n, [prog, "--arena-mb", "0"],
                    "arena", e, rc_want=2)
        expect_fail("options: %s --timeout-ms huge" % n,
                    [prog, "--timeout-ms", "99999999999999999999"],
                    "timeout", e, rc_want=2)
        expect_fail("options: %s --hosts (no value)" % n, [prog, "--hosts"],
                    "missing value for --hosts", e, rc_want=2)
    # The lease clock (loco-run --clock-skew ID:MS[:FOR_MS]): a node
    # refuses a malformed skew or skew end at its start.
    for skew, for_ms, says in (("12ms", None, "LOCO_CLOCK_SKEW_MS: expected"),
                               ("5", "0", "LOCO_CLOCK_SKEW_FOR_MS: expected"),
                               ("5", "-1", "LOCO_CLOCK_SKEW_FOR_MS: expected"),
                               ("5", "2s", "LOCO_CLOCK_SKEW_FOR_MS: expected"),
                               (None, "300", "needs a non-zero"),
                               ("0", "300", "needs a non-zero")):
        expect_fail("options: skew %s for %s" % (skew, for_ms),
                    [MEMNODE, "--id", "0"], says,
                    {k: v for k, v in dict(
                        e, LOCO_NODE_ID="0", LOCO_CLOCK_SKEW_MS=skew,
                        LOCO_CLOCK_SKEW_FOR_MS=for_ms).items()
                     if v is not None})


YCSB = os.path.join(B, "apps/ycsb/loco-ycsb")


def ycsb_cases():
    """loco-ycsb's own options, run alone (a private one-node cluster)."""
    rows = [
        ("--index nosuch", ["--index", "nosuch"],
         "--index: bad value 'nosuch' (expected one of local, local-ordered, kvstore"),
        ("--workload g", ["--workload", "g"],
         "--workload: bad value 'g' (expected a, b, c, d, e or f)"),
        ("--workload e, unordered", ["--index", "kvstore", "--workload", "e"],
         "--workload e: index kvstore has no scans"),
        ("--zipf 1", ["--zipf", "1"], "--zipf: bad value '1'"),
        ("--keys 0", ["--keys", "0"], "--keys: bad value '0'"),
        ("--value-size 12", ["--value-size", "12"],
         "--value-size: bad value '12' (expected a multiple of 8 in 8..4096)"),
        ("--threads 65", ["--threads", "65"], "--threads: bad value '65'"),
        ("--window 4", ["--window", "4"],
         "--window: bad value '4' (expected 1: the index interface is synchronous"),
        ("--duration 0", ["--duration", "0"], "--duration: bad value '0'"),
        ("--ops -1", ["--ops", "-1"], "--ops: bad value '-1'"),
        ("--scan-max 0", ["--scan-max", "0"], "--scan-max: bad value '0'"),
        ("--scan-max with --record", ["--scan-max", "50", "--record",
                                      path("ycsb-rec")],
         "--scan-max 50: at most 16 with --record"),
        ("--delete-ratio 0.6", ["--delete-ratio", "0.6"],
         "--delete-ratio: bad value '0.6'"),
        ("--writers some", ["--writers", "some"],
         "--writers: bad value 'some' (expected owner or any)"),
        ("--resize empty", ["--resize", ""], "--resize: bad value ''"),
        ("--resize on local", ["--resize", "rtx"],
         "--resize rtx: index local has no resize modes"),
        ("--ix-opt without =", ["--ix-opt", "broken"],
         "--ix-opt: bad value 'broken' (expected KEY=VALUE)"),
        ("--ix-opt unknown key", ["--ix-opt", "what=1"],
         "--ix-opt what=1: index local has no option what (it has: broken)"),
        ("--ix-opt bad value", ["--index", "kvstore", "--ix-opt", "locks=0"],
         "--ix-opt locks=0: bad value for index kvstore (expected 1..4096)"),
        ("--ix-opt 17 times", ["--ix-opt", "broken=none"] * 17,
         "--ix-opt: bad value 'broken=none' (expected at most 16 of them)"),
        ("--verify, no walk", ["--verify", "--index", "local"],
         "--verify: index local cannot walk its structure"),
        ("--keys under clients", ["--keys", "2", "--threads", "4"],
         "--keys 2: fewer than the 4 clients"),
        ("--record unwritable", ["--record", "/nonexistent/dir/x.jsonl",
                                 "--ops", "1"], "--record /nonexistent"),
        ("argument left over", ["a"], "unexpected argument 'a'"),
        ("--dead-ms 5", ["--dead-ms", "5"],
         "--dead-ms: bad value '5' (expected 10..600000)"),
        ("--dead-ms without a memory node", ["--dead-ms", "500", "--ops", "1"],
         "--dead-ms needs a memory node"),
        ("race --resize", ["--index", "race", "--resize", "fast"],
         "--resize fast: index race resizes rtx or cas"),
        ("race --ix-opt bad value", ["--index", "race", "--ix-opt",
                                     "initial-depth=9"],
         "--ix-opt initial-depth=9: bad value for index race (expected 0..4)"),
        ("race --ix-opt broken", ["--index", "race", "--ix-opt",
                                  "broken=some"],
         "--ix-opt broken=some: bad value for index race"),
        ("race --ix-opt max-depth under initial-depth",
         ["--index", "race", "--ix-opt", "max-depth=1", "--ix-opt",
          "initial-depth=3"],
         "--ix-opt max-depth=1: below initial-depth=3 (index race)"),
    ]
    for name, args, says in rows:
        expect_fail("ycsb: " + name, [YCSB] + args, says,
                    rc_want=1 if "unwritable" in name else 2)


def history_cases():
    ok = ('{"t":1,"ev":"inv","pid":1,"tid":0,"id":1,"op":"write","key":1,'
          '"args":[3]}\n{"t":2,"ev":"ret","pid":1,"tid":0,"id":1,"res":[]}\n')
    rows = [
        ("history: truncated line", ok[:-20], "line"),
        ("history: deeply nested", '{"t":1,"ev":"inv","pid":1,"tid":0,"id":1,'
         '"op":"write","args":' + "[" * 100000 + "]" * 100000 + "}\n", ":1: nesting too deep"),
        ("history: invalid UTF-8", ok.replace("write", "wr\xff\xfete"), ":1: unknown op"),
        ("history: binary", "\x00\x01\x02\xff" * 100,
         "cannot tell the history format"),
        ("history: ret without inv",
         '{"t":2,"ev":"ret","pid":1,"tid":0,"id":9,"res":[]}\n',
         ":1: return of op 9 of process 1/0 without an invocation"),
        ("history: jepsen garbage", "INFO  jepsen.util - x\t:invoke\n{:process",
         ":1: process must be a non-negative integer"),
    ]
    for name, text, says in rows:
        data = text.encode("latin-1")
        expect_fail(name, [LINCHECK, "--model", "register",
                           path("hist-" + name.split(": ")[1].replace(" ", "_"),
                                data)], says)
    big = path("hist-huge")
    with open(big, "wb") as f:
        f.write(b'{"t":1,"ev":"inv","op":"' + b"w" * (16 << 20) + b'"}\n')
    expect_fail("history: huge (16 MiB line)", [LINCHECK, "--model",
                                                 "register", big], ":1: missing field")
    os.unlink(big)
    expect_fail("history: missing file", [LINCHECK, "--model", "register",
                                          path("nohist")], "nohist")
    expect_fail("history: unknown model", [LINCHECK, "--model", "nosuch",
                                           path("hist-ok", ok)], "nosuch")


def cluster_cases():
    cl = Cluster()
    try:
        rc, out, _ = cl.started()
        if rc != 0:
            record("cluster: start", False, out[-400:])
            return
        base = held(cl.mem.pid)
        abuse("control: random bytes", cl, act_random)
        abuse("control: huge length field", cl, act_huge_len)
        abuse("control: truncated frame", cl, act_truncated)
        abuse("control: silent connection", cl, act_silent)
        abuse("control: 200 connections at once", cl, act_200)
        abuse("control: HELLO without the key", cl, act_hello_unauth)
        abuse("control: wrong cluster key", cl, act_wrong_key)
        abuse("control: old protocol version", cl, act_old_version)
        abuse("control: node with another key", cl, act_wrong_key_node)
        abuse("control: right key accepted", cl, act_right_key)
        if ONLY in "control: abuse leaves nothing held":
            why = holds_nothing(cl, base)
            record("control: abuse leaves nothing held", not why, why)
        if ONLY in "control: refusals logged once per address":
            n = cl.memlog().count("refused a control connection from 127.0.0.1")
            record("control: refusals logged once per address", n == 1,
                   "%d log lines" % n)
        # Two clusters, one hosts file: the second memory node 0 cannot
        # take the address, and says so; the first is unharmed.
        abuse("fault: two clusters, one hosts file", cl, lambda c: (
            lambda r: "" if r[0] not in (None, 0) and "cannot listen" in r[1]
            else "second node 0: exit %s: %s" % (r[0], r[1][-300:]))(
            run([MEMNODE, "--id", "0"], dict(c.e, LOCO_RUN_DIR=path("run2"))))
        )
    finally:
        cl.stop()
    # A region larger than the memory node's arena: the client is told
    # the arena is full, how full, and the option that sizes it.
    name = "fault: index pool over the arena"
    if ONLY in name:
        cl = Cluster(LOCO_ARENA_MB="8")
        try:
            rc, out, t = run([YCSB, "--id", "1", "--index", "race",
                              "--keys", "100000", "--ops", "1"], cl.e)
            says = "arena full: "
            ok = rc not in (None, 0) and says in out and "of 8 MiB in use" \
                in out and "LOCO_ARENA_MB" in out and t < HANG_S
            record(name, ok, "exit %s after %.1f s: %s" % (rc, t, out[-400:]))
        finally:
            cl.stop()
    # A memory node killed mid-run: a client's requests fail in bounded
    # time with a clear error; a new one started on the same (stale) run
    # directory serves again.
    if ONLY in "fault: memory node killed; stale run files":
        cl = Cluster()
        try:
            rc, out, _ = cl.started()
            cl.mem.kill()
            cl.mem.wait()
            rc2, out2, t = cl.probe("check", timeout_ms=2000)
            # A clear error names the node that is gone (any failure is
            # not enough: a probe that broke on its own would pass).
            ok = rc == 0 and rc2 not in (None, 0) and t < HANG_S and \
                "node 0" in out2 and not any(s in out2 for s in SAN)
            record("fault: memory node killed mid-run", ok,
                   "exit %s after %.1f s: %s" % (rc2, t, out2[-300:]))
            cl.mem = subprocess.Popen([MEMNODE, "--id", "0"], env=cl.e,
                                      stdin=subprocess.DEVNULL,
                                      stdout=cl.log, stderr=cl.log)
            rc3, out3, _ = cl.started()
            rc4, out4, _ = cl.probe("check", timeout_ms=5000)
            record("fault: stale run files", rc3 == 0 and rc4 == 0,
                   (out3 + out4)[-300:])
        finally:
            cl.stop()


# ---- the ucx transport (when built): UCX missing or unusable, no
# transport in common with a peer, a memory node dying or stopping under a
# busy client (docs/ucx.md) -------------------------------------------------

UCX = {"LOCO_TRANSPORT": "ucx", "UCX_TLS": "tcp"}


def wait_line(p, line, limit):
    """Reads P's output until a line starting with LINE: None, or what
    it printed instead (it ended, or LIMIT seconds passed)."""
    seen = b""
    deadline = time.monotonic() + limit
    fd = p.stdout.fileno()
    while (b"\n" + line) not in b"\n" + seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return seen.decode("utf-8", "replace") + " (no line after %g s)" \
                % limit
        chunk = os.read(fd, 4096)
        if not chunk:
            return seen.decode("utf-8", "replace") + " (it ended)"
        seen += chunk
    return None


def ucx_fault(name, fault, says, after=None):
    """A ucx-tcp cluster whose memory node holds the probe's pattern; a
    client busy reading it (loco-probe loop) while FAULT hits the node
    must end non-zero within the hang limit, saying SAYS. AFTER(cl), if
    given, then checks the node."""
    if ONLY not in name:
        return
    cl = Cluster(**UCX)
    try:
        if cl.started()[0] != 0:
            return record(name, False, "the cluster did not start")
        p = subprocess.Popen([PROBE, "--id", "1", "--timeout-ms", "1000",
                              "loop", str(cl.seed), "30"], env=cl.e,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        # The fault hits once the client is in its loop (its line), not
        # while it still says hello to the node.
        early = wait_line(p, b"loco-probe: looping", 30.0)
        if early is not None:
            p.kill()
            p.communicate()
            return record(name, False, "the client never looped: %s"
                          % early[-400:])
        fault(cl)
        t0 = time.monotonic()
        try:
            out = p.communicate(timeout=HANG_S)[0].decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return record(name, False, "client still running %g s after the "
                          "fault" % HANG_S)
        t = time.monotonic() - t0
        ok = p.returncode not in (None, 0) and says in out and \
            not any(s in out for s in SAN)
        record(name, ok, "exit %s after %.1f s: %s" % (p.returncode, t,
                                                      out[-400:]))
        if after:
            after(cl)
    finally:
        cl.mem.send_signal(signal.SIGCONT)
        cl.stop()


def ucx_stopped_intact(cl):
    cl.mem.send_signal(signal.SIGCONT)
    rc, out, _ = cl.probe("check", timeout_ms=5000)
    record("ucx: stopped memory node intact after", rc == 0, out[-300:])


def ucx_cases():
    if not os.path.exists(os.path.join(B, "test/transport/test_ucx")):
        ucx_not_run.append(True)
        return
    hosts = path("hosts-ucx", "0 127.0.0.1:%d memory\n" % free_ports(1)[0])
    base = [MEMNODE, "--id", "0", "--hosts", hosts, "--transport", "ucx"]
    expect_fail("ucx: libucp missing", base, "cannot load UCX",
                e=env(LOCO_UCX_LIB="/nonexistent/libucp.so.0"))
    expect_fail("ucx: UCX_TLS with nothing usable", base,
                "UCX found no usable transport (UCX_TLS=nosuchtransport",
                e=env(UCX_TLS="nosuchtransport"))
    if ONLY in "ucx: no transport in common with a peer":
        cl = Cluster(**UCX)
        try:
            # Node 2 finds the memory node up first: a node 1 that came
            # before it listened would time out, not learn the mismatch.
            rc, out, _ = cl.started(node=2)
            if rc == 0:
                rc, out, _ = cl.probe("write", UCX_TLS="sm")
            record("ucx: no transport in common with a peer",
                   rc not in (None, 0) and "cannot attach node 1's memory: "
                   "peer uses a different transport" in out and
                   not any(s in out for s in SAN), "exit %s: %s" % (rc, out[-400:]))
        finally:
            cl.stop()
    # The memory node killed under a busy client: the client's endpoint
    # fails at once (TCP: the connection closes).
    ucx_fault("ucx: memory node killed under a client",
              lambda c: c.mem.kill(), "op to node 0 failed")
    # Stopped (SIGSTOP): the client's read times out (--timeout-ms 1000),
    # its QP is aborted; the node, resumed, still has its data intact.
    ucx_fault("ucx: memory node stopped under a client",
              lambda c: c.mem.send_signal(signal.SIGSTOP),
              "no answer from node 0 in time", ucx_stopped_intact)


def main():
    try:
        hosts_cases()
        key_cases()
        durable_cases()
        option_cases()
        ycsb_cases()
        history_cases()
        cluster_cases()
        ucx_cases()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    failed = sum(1 for _, ok in results if not ok)
    print("%d cases, %d failed" % (len(results), failed))
    if failed or not results:
        return 1
    if ucx_not_run:
        return skip.missing_status("libucx-dev", "no ucx transport in this "
                                   "build: its cases did not run")
    return 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: MIT
"""Launchers of tools/loco-run beyond its own host.

--launcher mpirun: the job is started by Open MPI's mpirun in its MPMD
form, one application context per node (`-np 1 loco-memnode : ... : -np 1
PROGRAM ARGS`), so that each node gets its own environment (its faults).
The nodes take their rank from mpirun and find each other through PMIx (no
hosts file).

--launcher srun: srun --mpi=pmix --multi-prog, ranks and addresses from
Slurm's PMIx (SrunJob).

--launcher ssh: one ssh per node to the hosts of --hostfile; loco-run
writes the hosts file (each node a free port of its host) and copies it
with the key to every host (by ssh), so the nodes need no PMIx. Each remote
node is watched by a shell that ends it (SIGTERM, SIGKILL 2 s later) when
its ssh's stdin closes: loco-run closes it to stop a node, and a loco-run
that dies closes it too.

With both, the cluster key is a file (mode 0600) at the same path on every
host, output lines are labelled [nID] and result lines (JSON objects on
stdout) collected into one file (--results). Standard library only."""

import os
import queue
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

LAUNCHERS = ("local", "mpirun", "srun", "ssh")
PORT_LO, PORT_HI = 10000, 32000   # ssh: ports below the ephemeral range
KILL_GRACE_S = 2                  # ssh: the watcher's SIGTERM to SIGKILL
STOP_GRACE_S = 5.0          # between SIGTERM and SIGKILL of the launcher
# --tag-output: "[JOB,RANK]<stdout>:line"
TAG = re.compile(rb"^\[\d+,(\d+)\]<(stdout|stderr)>:(.*)$", re.S)
# Options of the local launcher that a node cannot apply to itself.
LOCAL_ONLY = (("restart", "--restart"), ("durable", "--durable"),
              ("mirror", "--mirror"), ("netns", "--netns"))


def add_args(p):
    p.add_argument("--launcher", default="local", choices=LAUNCHERS)
    p.add_argument("--hostfile")
    p.add_argument("--results")


def check_args(a, usage_error):
    """Options that do not go with the launcher: USAGE_ERROR(text)."""
    if a.launcher == "local":
        if a.hostfile:
            raise usage_error("--hostfile needs --launcher mpirun or ssh")
        return
    for attr, flag in LOCAL_ONLY:
        if getattr(a, attr):
            raise usage_error("%s works with --launcher local only" % flag)
    if a.hostfile and not os.path.isfile(a.hostfile):
        raise usage_error("--hostfile %s: no such file" % a.hostfile)
    if a.launcher == "ssh":
        if not a.hostfile:
            raise usage_error("--launcher ssh needs --hostfile FILE")
        if not shutil.which(ssh_argv()[0]):
            raise usage_error("--launcher ssh: no %s in PATH" % ssh_argv()[0])
        return
    if a.launcher == "srun":
        if a.hostfile:
            raise usage_error("--launcher srun takes its hosts from Slurm "
                              "(salloc/sbatch), not --hostfile")
        if not shutil.which("srun"):
            raise usage_error("--launcher srun: no srun in PATH")
        return
    if not shutil.which("mpirun"):
        raise usage_error("--launcher mpirun: no mpirun in PATH (Debian 12: "
                          "apt-get install openmpi-bin, or tools/install-deps)")


class Results:
    """The result lines (JSON objects on a node's stdout) of every node,
    in one file."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.lock = threading.Lock()

    def feed(self, fd, line):
        if fd == 1 and line.startswith(b"{"):
            with self.lock:
                self.f.write(line + b"\n")
                self.f.flush()

    def close(self):
        self.f.close()


def hostfile_slots(path):
    """(host, slots) of each line of an Open MPI hostfile ("HOST
    [slots=N]"; slots 1 if not given), in order."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            slots = 1
            for w in words[1:]:
                k, _, v = w.partition("=")
                if k == "slots" and v.isdigit() and int(v) > 0:
                    slots = int(v)
                elif k not in ("max_slots", "max-slots"):
                    raise RuntimeError("%s:%d: unexpected '%s' (expected "
                                       "HOST [slots=N])" % (path, n, w))
            out.append((words[0], slots))
    return out


def hostfile_hosts(path):
    """Host names of an Open MPI hostfile, each once."""
    hosts = []
    for host, _ in hostfile_slots(path):
        if host not in hosts:
            hosts.append(host)
    return hosts


def ssh_argv():
    """LOCO_SSH (e.g. "ssh -F CONFIG"), else ssh in batch mode."""
    return shlex.split(os.environ.get("LOCO_SSH") or "ssh -o BatchMode=yes")


def is_local(host):
    return host in ("localhost", "127.0.0.1", socket.gethostname(),
                    socket.getfqdn())


def sh_host(host, cmd, stdin=None):
    """Runs CMD (a shell command) on HOST: here, or by ssh; STDIN: bytes
    for its standard input."""
    argv = ["sh", "-c", cmd] if is_local(host) else ssh_argv() + [host, cmd]
    return subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)


def put_files(host, d, files):
    """FILES (name: bytes) into a new directory D (mode 0700) on HOST,
    each mode 0600, through ssh's standard input (no scp needed)."""
    script = "umask 077 && mkdir -p %s" % shlex.quote(d)
    blob = b""
    for name, data in files.items():
        script += " && head -c %d > %s" % (len(data), shlex.quote(
            os.path.join(d, name)))
        blob += data
    r = sh_host(host, script, blob)
    if r.returncode:
        raise RuntimeError("cannot put %s on %s: %s" % (", ".join(files), host,
                           r.stderr.decode(errors="replace").strip()))


class MpiJob:
    """One mpirun of every node; see the module's text."""

    def __init__(self, a, program, memnode, msg, rundir_prefix):
        self.a = a
        self.msg = msg
        self.program, self.memnode = program, memnode
        self.prefix = rundir_prefix
        self.proc = None
        self.dir = None
        self.run_dir = None
        self.hosts = hostfile_hosts(a.hostfile) if a.hostfile else ["localhost"]
        self.results = Results(a.results) if a.results else None
        self.threads = []
        self.kill_ids, self.statuses, self.failed = set(), {}, None
        self.t0 = time.monotonic()

    # -- set-up --

    def key(self):
        """A fresh key in a private directory, copied to the same path on
        every other host of the hostfile (ssh, as mpirun reaches them)."""
        self.dir = tempfile.mkdtemp(prefix=self.prefix)
        key = os.path.join(self.dir, "cluster.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        with open(key, "rb") as f:
            data = f.read()
        for host in self.hosts:
            if not is_local(host):
                put_files(host, self.dir, {"cluster.key": data})
        return key

    def env(self):
        a = self.a
        self.run_dir = os.path.join("/dev/shm", os.path.basename(self.dir))
        env = dict(a.extra_env, LOCO_CLUSTER_KEY=self.key_path,
                   LOCO_TRANSPORT=a.transport, LOCO_RUN_DIR=self.run_dir,
                   LOCO_MEMORY_NODES=str(a.memory))
        if a.transport == "shm-weak":
            env.setdefault("LOCO_SHM_WEAK", str(int.from_bytes(
                os.urandom(4), "little") % (2**31 - 1) + 1))
            self.msg("shm-weak seed LOCO_SHM_WEAK=%s" % env["LOCO_SHM_WEAK"])
        if a.transport == "ucx-tcp":
            env.setdefault("UCX_TLS", "tcp")
        return env

    def argv(self):
        a = self.a
        self.key_path = self.key()
        env = self.env()
        kills = {node: when for when, node in a.kills}
        argv = ["mpirun", "--tag-output", "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if kills:
            # A killed node must not end the job (mpirun's default):
            # the others go on, and each node's wrapper reports its own
            # status (mpirun's own stays 0 under recovery).
            argv.append("--enable-recovery")
        if a.hostfile:
            argv += ["--hostfile", a.hostfile]
        nodes = [[self.memnode]] * a.memory + \
            [[self.program] + a.cmd[1:]] * a.nodes
        for nid, prog in enumerate(nodes):
            if nid:
                argv.append(":")
            node_env = dict(env)
            if nid in kills:
                node_env["LOCO_KILL_AT"] = "%g" % kills[nid]
            argv += ["-np", "1"]
            for k, v in sorted(node_env.items()):
                argv += ["-x", "%s=%s" % (k, v)]
            argv += (STATUS_WRAP + prog) if kills else prog
        self.kill_ids = set(kills)
        return argv

    # -- running --

    name = "mpirun"

    def parse(self, line, fd):
        """(rank, stream, text) of a tagged line, else None."""
        m = TAG.match(line)
        if not m:
            return None
        return m.group(1), 1 if m.group(2) == b"stdout" else 2, m.group(3)

    def node_status(self, rank, body):
        """A node's STATUS_WRAP line: record and report its status as
        the local launcher does; a failure (other than a --kill's) stops
        the job, since mpirun under recovery would not."""
        m = STATUS_LINE.match(body)
        if not m:
            return False
        nid, status = int(rank), int(m.group(1))
        self.statuses[nid] = status
        how = ("signal %d" % (status - 128)) if status > 128 else \
            ("status %d" % status)
        if status:
            self.msg("n%d exited with %s at %.2fs"
                     % (nid, how, time.monotonic() - self.t0))
        if status and not (nid in self.kill_ids and status == 137) and \
                status != 3 and self.failed is None:
            self.failed = status
            self.msg("n%d failed; stopping the job" % nid)
            self.stop()
        return True

    def pump(self, pipe, fd):
        """The launcher's tagged lines as [nRANK] lines on the same
        stream; its own lines as [mpirun] (or [srun]) on stderr."""
        streams = {1: sys.stdout.buffer, 2: sys.stderr.buffer}
        own = b"[%s] " % self.name.encode()
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.rstrip(b"\n")
                m = self.parse(line, fd)
                if m and self.node_status(m[0], m[2]):
                    continue
                if m:
                    rank, out, body = m
                    text = b"[n%s] %s\n" % (rank, body)
                    if self.results:
                        self.results.feed(out, body)
                else:
                    out, text = 2, own + line + b"\n"
                try:
                    streams[out].write(text)
                    streams[out].flush()
                except (OSError, ValueError):
                    pass

    def start(self):
        argv = self.argv()
        self.t0 = time.monotonic()
        self.msg("%d memory + %d compute nodes by %s on %s"
                 % (self.a.memory, self.a.nodes, self.name,
                    ", ".join(self.hosts)))
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     start_new_session=True)
        for pipe, fd in ((self.proc.stdout, 1), (self.proc.stderr, 2)):
            t = threading.Thread(target=self.pump, args=(pipe, fd),
                                 daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        """SIGTERM to mpirun (it ends every node on every host), SIGKILL
        to its process group after STOP_GRACE_S."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.msg("%s ignored SIGTERM for %g s; killed"
                     % (self.name, STOP_GRACE_S))
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def run(self):
        """mpirun's exit status (the first failing node's: mpirun ends
        the job at a node's failure), 124 on timeout."""
        self.start()
        try:
            status = self.proc.wait(timeout=self.a.timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            self.msg("timeout after %g s" % self.a.timeout)
            status = 124
        for t in self.threads:
            t.join(2.0)
        if status and status != 124:
            self.msg("%s exited with status %d" % (self.name, status))
        if self.kill_ids and status != 124:
            # Under recovery: the first failure, else a killed node's
            # (a run with a kill ends non-zero, as the local launcher's).
            killed = [s for s in self.statuses.values() if s]
            status = self.failed or (killed[0] if killed else status)
        return status

    def cleanup(self):
        """Stops mpirun if it still runs; removes the key directory and
        the run directory on every host."""
        self.stop()
        if self.results:
            self.results.close()
        for host in self.hosts:
            dirs = " ".join(d for d in (self.dir, self.run_dir) if d)
            if dirs:
                sh_host(host, "rm -rf %s" % dirs)


# Under --kill, each node runs in this wrapper, which reports the
# node's exit status on its stderr (128 + N for signal N) as its last line.
STATUS_WRAP = ["sh", "-c", '"$@"; s=$?; echo "loco-run: node status $s" >&2;'
               ' exit $s', "loco-node"]
STATUS_LINE = re.compile(rb"^loco-run: node status (\d+)$")

SRUN_TAG = re.compile(rb"^\s*(\d+): (.*)$", re.S)


class SrunJob(MpiJob):
    """--launcher srun: `srun --mpi=pmix --multi-prog` in the current
    allocation (or one srun makes), ranks and addresses from Slurm's PMIx,
    output by srun --label; -K1 ends the job at a task's failure. In an
    allocation of several nodes the key is broadcast by sbcast and the
    directories are removed on every node by srun."""

    name = "srun"

    def __init__(self, *args):
        super().__init__(*args)
        self.nodes_n = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1)
        self.hosts = ["localhost"]

    def parse(self, line, fd):
        m = SRUN_TAG.match(line)
        return (m.group(1), fd, m.group(2)) if m else None

    def key(self):
        key = super().key()
        if self.nodes_n > 1:
            r = subprocess.run(["sbcast", "-f", "-p", key, key],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
            if r.returncode:
                raise RuntimeError("sbcast of the cluster key: %s"
                                   % r.stderr.strip())
        return key

    def argv(self):
        a = self.a
        self.key_path = self.key()
        env = self.env()
        kills = {node: when for when, node in a.kills}
        nodes = [[self.memnode]] * a.memory + \
            [[self.program] + a.cmd[1:]] * a.nodes
        # Each node's command in a script of its own: srun's multi-prog
        # file would expand % sequences in the arguments (%n, %t) and
        # split quoted ones.
        conf = os.path.join(self.dir, "multi-prog.conf")
        with open(conf, "w") as f:
            for nid, prog in enumerate(nodes):
                kill = ["LOCO_KILL_AT=%g" % kills[nid]] if nid in kills \
                    else []
                script = os.path.join(self.dir, "node%d.sh" % nid)
                with open(script, "w") as g:
                    g.write("exec env %s\n" % " ".join(
                        shlex.quote(x) for x in kill + prog))
                f.write("%d /bin/sh %s\n" % (nid, script))
        export = ",".join(["ALL"] + ["%s=%s" % kv for kv in
                                      sorted(env.items())])
        return ["srun", "--mpi=pmix", "--label", "--kill-on-bad-exit=1",
                "-n", str(len(nodes)), "--export=" + export,
                "--multi-prog", conf]

    def cleanup(self):
        super().cleanup()
        if self.nodes_n > 1 and self.dir:
            subprocess.run(["srun", "-N", str(self.nodes_n),
                            "--ntasks-per-node=1", "rm", "-rf", self.dir,
                            self.run_dir], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


# The remote side of a node: PROGRAM in the background, a watcher that
# ends it when ssh's stdin closes, the program's status as ssh's.
# (An asynchronous list reads /dev/null unless its stdin is redirected:
# hence the watcher's <&0.)
WATCH = ("%s & p=$!; (cat >/dev/null; kill -TERM $p; sleep " +
         str(KILL_GRACE_S) + "; kill -KILL $p) <&0 >/dev/null 2>&1 & "
         "w=$!; exec </dev/null; wait $p; s=$?; kill $w; exit $s")


class SshNode:
    def __init__(self, nid, role, host, port, argv):
        self.id, self.role, self.host, self.port = nid, role, host, port
        self.argv = argv
        self.proc = None
        self.status = None


class SshJob:
    """One ssh per node; see the module's text."""

    def __init__(self, a, program, memnode, msg, rundir_prefix):
        self.a, self.msg = a, msg
        self.prefix = rundir_prefix
        self.dir = self.run_dir = None
        self.nodes = []
        self.events = queue.Queue()
        self.threads = []
        self.results = Results(a.results) if a.results else None
        self.failure = None
        slots = hostfile_slots(a.hostfile)
        seats = [h for h, n in slots for _ in range(n)]
        total = a.memory + a.nodes
        if total > len(seats):
            raise RuntimeError("%s has %d slots for %d nodes" % (
                a.hostfile, len(seats), total))
        self.hosts = hostfile_hosts(a.hostfile)
        rng = random.SystemRandom()
        taken = set()
        for nid in range(total):
            host = seats[nid]
            port = rng.randrange(PORT_LO, PORT_HI)
            while (host, port) in taken:
                port = rng.randrange(PORT_LO, PORT_HI)
            taken.add((host, port))
            mem = nid < a.memory
            argv = [memnode] if mem else [program] + a.cmd[1:]
            self.nodes.append(SshNode(nid, "memory" if mem else "compute",
                                      host, port, argv))

    def prepare(self):
        """The hosts file and the key, on every host at the same path."""
        self.dir = tempfile.mkdtemp(prefix=self.prefix)
        self.run_dir = os.path.join("/dev/shm", os.path.basename(self.dir))
        hosts = "".join("%d %s:%d %s\n" % (n.id, n.host, n.port, n.role)
                        for n in self.nodes).encode()
        files = {"hosts": hosts, "cluster.key": os.urandom(32)}
        for host in self.hosts:
            put_files(host, self.dir, files)
        self.msg("hosts file and key in %s on every host" % self.dir)

    def command(self, node):
        a = self.a
        env = dict(a.extra_env, LOCO_HOSTS=os.path.join(self.dir, "hosts"),
                   LOCO_CLUSTER_KEY=os.path.join(self.dir, "cluster.key"),
                   LOCO_NODE_ID=str(node.id), LOCO_ROLE=node.role,
                   LOCO_TRANSPORT=a.transport, LOCO_RUN_DIR=self.run_dir)
        if a.transport == "ucx-tcp":
            env.setdefault("UCX_TLS", "tcp")
        for when, nid in a.kills:
            if nid == node.id:
                env["LOCO_KILL_AT"] = "%g" % when
        prog = "exec env %s %s" % (
            " ".join(shlex.quote("%s=%s" % kv) for kv in sorted(env.items())),
            " ".join(shlex.quote(x) for x in node.argv))
        return "cd %s || exit 1; %s" % (shlex.quote(os.getcwd()),
                                          WATCH % prog)

    def pump(self, node, pipe, fd):
        stream = sys.stdout.buffer if fd == 1 else sys.stderr.buffer
        prefix = b"[n%d] " % node.id
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.rstrip(b"\n")
                if self.results:
                    self.results.feed(fd, line)
                try:
                    stream.write(prefix + line + b"\n")
                    stream.flush()
                except (OSError, ValueError):
                    pass

    def wait(self, node):
        node.proc.wait()
        self.events.put(node)

    def start(self):
        self.msg("%d memory + %d compute nodes by ssh on %s"
                 % (self.a.memory, self.a.nodes, ", ".join(self.hosts)))
        for node in self.nodes:
            node.proc = subprocess.Popen(
                ssh_argv() + [node.host, self.command(node)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)
            for pipe, fd in ((node.proc.stdout, 1), (node.proc.stderr, 2)):
                t = threading.Thread(target=self.pump, args=(node, pipe, fd),
                                     daemon=True)
                t.start()
                self.threads.append(t)
            threading.Thread(target=self.wait, args=(node,),
                             daemon=True).start()

    def end(self, nodes):
        """Closes the stdin of NODES' ssh: each remote watcher ends its
        node."""
        for n in nodes:
            if n.proc and n.proc.stdin and not n.proc.stdin.closed:
                try:
                    n.proc.stdin.close()
                except OSError:
                    pass

    def on_exit(self, node, stopping):
        node.status = node.proc.returncode
        # A memory node we are stopping may end by our SIGTERM itself
        # (128 + 15 from the remote shell), as the local launcher allows.
        stopped = stopping and node.role == "memory" and node.status == 143
        if self.failure is not None or stopped or (node.status == 0 and (
                node.role == "compute" or stopping)):
            return      # the others' ends after a failure are its doing
        if node.role == "memory" and not stopping:
            self.msg("memory node n%d died on its own (status %d)"
                     % (node.id, node.status))
        else:
            self.msg("n%d exited with status %d" % (node.id, node.status))
        if self.failure is None:
            self.failure = node.status or 1
            self.msg("stopping every node")
            self.end(self.nodes)

    def run(self):
        """The first failing node's status; 124 on timeout."""
        self.prepare()
        self.start()
        deadline = time.monotonic() + self.a.timeout
        stopping = False
        while any(n.status is None for n in self.nodes):
            if not stopping and all(n.status is not None for n in self.nodes
                                    if n.role == "compute"):
                stopping = True
                self.end([n for n in self.nodes if n.role == "memory"])
            try:
                node = self.events.get(timeout=max(0.01, deadline -
                                                   time.monotonic()))
            except queue.Empty:
                self.msg("timeout after %g s" % self.a.timeout)
                self.stop()
                return 124
            self.on_exit(node, stopping)
        for t in self.threads:
            t.join(2.0)
        return self.failure or 0

    def stop(self):
        """Ends every node, then every ssh still running."""
        self.end(self.nodes)
        deadline = time.monotonic() + KILL_GRACE_S + STOP_GRACE_S
        for n in self.nodes:
            if n.proc is None:
                continue
            try:
                n.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(n.proc.pid, signal.SIGKILL)
                n.proc.wait()

    def cleanup(self):
        self.stop()
        if self.results:
            self.results.close()
        for host in self.hosts:
            dirs = " ".join(shlex.quote(d) for d in (self.dir, self.run_dir)
                            if d)
            if dirs:
                sh_host(host, "rm -rf %s" % dirs)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def run(a, program, memnode, msg, interrupted, rundir_prefix):
    """--launcher mpirun or ssh: the exit status loco-run returns.
    INTERRUPTED: the exception loco-run's signal handler raises (status
    128+signo)."""
    job = None
    try:
        job = {"ssh": SshJob, "srun": SrunJob, "mpirun": MpiJob}[a.launcher](
            a, program, memnode, msg, rundir_prefix)
        return job.run()
    except interrupted as e:
        msg("got %s; stopping mpirun" % signal.Signals(e.signo).name)
        return 128 + e.signo
    except (OSError, RuntimeError) as e:
        msg("cannot start the job: %s" % e)
        return 2
    finally:
        if job:
            job.cleanup()

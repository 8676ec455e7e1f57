# SPDX-License-Identifier: MIT
"""Launchers of tools/loco-run beyond its own host (--launcher mpirun):
the job is started by Open MPI's mpirun in its MPMD form, one application
context per node (`-np 1 loco-memnode : ... : -np 1 PROGRAM ARGS`), so
that each node gets its own environment (its faults). The nodes take their
rank from mpirun and find each other through PMIx (no hosts file); the
cluster key is a file (mode 0600) at the same path on every host. Output
lines are labelled [nID], result lines (JSON objects on stdout) collected
into one file (--results). Standard library only."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

LAUNCHERS = ("local", "mpirun")
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
            raise usage_error("--hostfile needs --launcher mpirun")
        return
    for attr, flag in LOCAL_ONLY:
        if getattr(a, attr):
            raise usage_error("%s works with --launcher local only" % flag)
    if a.hostfile and not os.path.isfile(a.hostfile):
        raise usage_error("--hostfile %s: no such file" % a.hostfile)
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


def hostfile_hosts(path):
    """Host names of an Open MPI hostfile ("HOST [slots=N]" lines)."""
    hosts = []
    with open(path) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if words and words[0] not in hosts:
                hosts.append(words[0])
    return hosts


def is_local(host):
    return host in ("localhost", "127.0.0.1", socket.gethostname(),
                    socket.getfqdn())


def sh_host(host, cmd):
    """Runs CMD (a shell command) on HOST: here, or by ssh."""
    argv = ["sh", "-c", cmd] if is_local(host) else \
        ["ssh", "-o", "BatchMode=yes", host, cmd]
    return subprocess.run(argv, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)


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

    # -- set-up --

    def key(self):
        """A fresh key in a private directory, copied to the same path on
        every other host of the hostfile (ssh, as mpirun reaches them)."""
        self.dir = tempfile.mkdtemp(prefix=self.prefix)
        key = os.path.join(self.dir, "cluster.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        for host in self.hosts:
            if is_local(host):
                continue
            r = sh_host(host, "mkdir -m 700 -p %s" % self.dir)
            if r.returncode == 0:
                r = subprocess.run(["scp", "-q", "-p", key,
                                    "%s:%s" % (host, key)],
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
            if r.returncode:
                raise RuntimeError("cannot put the cluster key on %s: %s"
                                   % (host, r.stderr.strip()))
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
            argv += prog
        return argv

    # -- running --

    def pump(self, pipe, fd):
        """mpirun's tagged lines as [nRANK] lines on the same stream; its
        own lines as [mpirun] on stderr."""
        streams = {1: sys.stdout.buffer, 2: sys.stderr.buffer}
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.rstrip(b"\n")
                m = TAG.match(line)
                if m:
                    out = 1 if m.group(2) == b"stdout" else 2
                    body = m.group(3)
                    text = b"[n%s] %s\n" % (m.group(1), body)
                    if self.results:
                        self.results.feed(out, body)
                else:
                    out, text = 2, b"[mpirun] " + line + b"\n"
                try:
                    streams[out].write(text)
                    streams[out].flush()
                except (OSError, ValueError):
                    pass

    def start(self):
        argv = self.argv()
        self.msg("%d memory + %d compute nodes by mpirun on %s"
                 % (self.a.memory, self.a.nodes, ", ".join(self.hosts)))
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
            self.msg("mpirun ignored SIGTERM for %g s; killed" % STOP_GRACE_S)
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
            self.msg("mpirun exited with status %d" % status)
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


def run(a, program, memnode, msg, interrupted, rundir_prefix):
    """--launcher mpirun: the exit status loco-run returns. INTERRUPTED:
    the exception loco-run's signal handler raises (status 128+signo)."""
    job = MpiJob(a, program, memnode, msg, rundir_prefix)
    try:
        return job.run()
    except interrupted as e:
        msg("got %s; stopping mpirun" % signal.Signals(e.signo).name)
        return 128 + e.signo
    except (OSError, RuntimeError) as e:
        msg("cannot start the job: %s" % e)
        return 2
    finally:
        job.cleanup()

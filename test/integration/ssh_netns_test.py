#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ssh_netns_test.py: tools/loco-run --launcher ssh across network
namespaces on ucx-tcp. Two "hosts", each a namespace with an sshd of its
own (a key pair made for the test, loopback-free namespace addresses
10.79.0.2 and .3 only), two nodes on each (slots=2: several nodes on one
host, each its own port); loco-run runs in a third namespace and reaches
them only by ssh. 1 memory node and 3 compute nodes run loco-transfer:
conserved, every node's result line in --results, every output line
labelled, nothing left on the hosts (the key and run directories). Then a
compute node killed by its own LOCO_KILL_AT (--kill) ends the job with
its status and the others stopped.

Root only; exit 77 (skipped) without root, ip, sshd or ssh. Everything it
made (namespaces, sshds, files) is removed at the end.
LOCO_BUILD_DIR: the build directory."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("LOCO_BUILD_DIR", "build")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
LOCO_RUN = os.path.join(REPO, "tools", "loco-run")
TAG = "loco-sshtest-%d" % os.getpid()
NET = "10.79.0."
HOSTS = {"h1": NET + "2", "h2": NET + "3"}
CLIENT = NET + "10"
SSHD = "/usr/sbin/sshd"


def sh(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


class Net:
    def __init__(self, work):
        self.work = work
        self.made = []
        self.sshd = []

    def ns(self, name):
        full = "%s-%s" % (TAG, name)
        sh("ip", "netns", "add", full)
        self.made.append(full)
        sh("ip", "-n", full, "link", "set", "lo", "up")
        return full

    def attach(self, hub, name, addr, idx):
        full = self.ns(name)
        sh("ip", "-n", hub, "link", "add", "p%d" % idx, "type", "veth",
           "peer", "name", "loco0", "netns", full)
        sh("ip", "-n", hub, "link", "set", "p%d" % idx, "master", "br0", "up")
        sh("ip", "-n", full, "addr", "add", addr + "/24", "dev", "loco0")
        sh("ip", "-n", full, "link", "set", "loco0", "up")
        return full

    def setup(self):
        hub = self.ns("hub")
        sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", hub, "link", "set", "br0", "up")
        self.client = self.attach(hub, "client", CLIENT, 0)
        self.host_ns = {}
        for i, (name, addr) in enumerate(sorted(HOSTS.items()), 1):
            self.host_ns[name] = self.attach(hub, name, addr, i)

    def keys(self):
        w = self.work
        for k in ("id", "host"):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
               os.path.join(w, k))
        shutil.copy(os.path.join(w, "id.pub"), os.path.join(w, "auth"))
        with open(os.path.join(w, "ssh_config"), "w") as f:
            f.write("Host *\n  User root\n  IdentityFile %s/id\n"
                    "  UserKnownHostsFile /dev/null\n"
                    "  StrictHostKeyChecking no\n  BatchMode yes\n"
                    "  LogLevel ERROR\n  ConnectTimeout 10\n" % w)

    def start_sshd(self):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for name, addr in sorted(HOSTS.items()):
            cfg = os.path.join(self.work, "sshd-%s" % name)
            with open(cfg, "w") as f:
                f.write("ListenAddress %s\nHostKey %s/host\n"
                        "AuthorizedKeysFile %s/auth\nPermitRootLogin "
                        "prohibit-password\nPasswordAuthentication no\n"
                        "KbdInteractiveAuthentication no\nUsePAM no\n"
                        "StrictModes no\nPidFile none\n"
                        % (addr, self.work, self.work))
            self.sshd.append(subprocess.Popen(
                ["ip", "netns", "exec", self.host_ns[name], SSHD, "-D", "-e",
                 "-f", cfg], stdout=subprocess.DEVNULL,
                stderr=open(cfg + ".log", "w")))

    def ssh_ready(self, env):
        """Until both sshds answer (at most 30 s)."""
        end = time.monotonic() + 30
        for addr in HOSTS.values():
            while True:
                r = subprocess.run(["ip", "netns", "exec", self.client] +
                                   env["LOCO_SSH"].split() + [addr, "true"],
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
                if r.returncode == 0:
                    break
                if time.monotonic() > end:
                    raise RuntimeError("sshd on %s does not answer: %s"
                                       % (addr, r.stderr.decode().strip()))
                time.sleep(0.2)

    def teardown(self):
        for p in self.sshd:
            p.send_signal(signal.SIGTERM)
        for p in self.sshd:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name],
                           stderr=subprocess.DEVNULL)


def fail(text):
    print("ssh_netns_test: FAIL: " + text)
    sys.exit(1)


def loco_run(net, env, args):
    argv = ["ip", "netns", "exec", net.client, LOCO_RUN, "--launcher", "ssh",
            "--transport", "ucx-tcp", "--env", "UCX_NET_DEVICES=loco0",
            "--timeout", "90"] + args
    print("ssh_netns_test: $ " + " ".join(argv))
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=150)
    out = r.stdout.decode(errors="replace")
    sys.stdout.write(out)
    return r.returncode, out


def left_behind(out):
    """The job's directory (named by loco-run) and its run directory are
    gone from every host (the hosts share this disk)."""
    m = re.search(r"hosts file and key in (\S+) on every host", out)
    if not m:
        fail("loco-run did not name the job's directory")
    for d in (m.group(1), os.path.join("/dev/shm",
                                       os.path.basename(m.group(1)))):
        if os.path.exists(d):
            fail("left behind: " + d)


def check(net, env, work):
    hostfile = os.path.join(work, "hostfile")
    with open(hostfile, "w") as f:
        for addr in sorted(HOSTS.values()):
            f.write("%s slots=2\n" % addr)
    res = os.path.join(work, "results.jsonl")
    rc, out = loco_run(net, env, ["--hostfile", hostfile, "-m", "1", "-n",
                                  "3", "--results", res, "--",
                                  os.path.join(BUILD, "apps/transfer/"
                                               "loco-transfer"),
                                  "--duration", "0.5"])
    if rc != 0:
        fail("loco-run exited with %d" % rc)
    for n in range(4):
        if not re.search(r"^\[n%d\] " % n, out, re.M):
            fail("no output line of n%d" % n)
    with open(res) as f:
        lines = [json.loads(line) for line in f]
    cl = [r for r in lines if r.get("scope") == "cluster"]
    nodes = sorted(r["node"] for r in lines if r.get("scope") == "node")
    if len(cl) != 1 or not cl[0]["conserved"] or nodes != [1, 2, 3]:
        fail("results: %d cluster lines, nodes %s" % (len(cl), nodes))
    left_behind(out)
    print("ssh_netns_test: ok: conserved over ssh, 4 nodes on 2 hosts")

    rc, out = loco_run(net, env, ["--hostfile", hostfile, "-m", "1", "-n",
                                  "3", "--kill", "2@1", "--",
                                  os.path.join(BUILD, "apps/transfer/"
                                               "loco-transfer"),
                                  "--duration", "30"])
    if rc != 137 or "node 2 kills itself at 1.00 s" not in out or \
            "stopping every node" not in out:
        fail("--kill 2@1: exit %d (expected 137, the others stopped)" % rc)
    left_behind(out)
    print("ssh_netns_test: ok: a node's LOCO_KILL_AT ended the job (137)")


def main():
    if os.geteuid() != 0 or not all(shutil.which(p) for p in
                                    ("ip", "ssh", "ssh-keygen")) \
            or not os.access(SSHD, os.X_OK):
        print("ssh_netns_test: skipped: needs root, ip, ssh and sshd "
              "(apt-get install openssh-server openssh-client)")
        return 77
    work = tempfile.mkdtemp(prefix="loco-sshtest-")
    os.chmod(work, 0o700)
    net = Net(work)
    env = dict(os.environ, LOCO_SSH="ssh -F %s/ssh_config" % work,
               LOCO_BUILD_DIR=BUILD)
    try:
        net.setup()
        net.keys()
        net.start_sshd()
        net.ssh_ready(env)
        check(net, env, work)
    except (subprocess.CalledProcessError, RuntimeError) as e:
        fail(str(e))
    finally:
        net.teardown()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

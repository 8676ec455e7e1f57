#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""slurm_test.py: a single-node Slurm (munged, slurmctld and slurmd from
Debian's slurm-wlm, each with a configuration, sockets, ports and state of
this test's own, none of the host's) and jobs started by srun with no
hosts file and no --id (ranks from Slurm, addresses through Slurm's PMIx):

  - `srun --mpi=pmix --multi-prog` by hand: 1 loco-memnode, 3
    loco-transfer: conserved, the memory node stops at the job's end;
  - `tools/loco-run --launcher srun`: loco-ycsb --index race (missing 0,
    wrong 0) and loco-kvstore --record (linearizable), result lines in
    --results.

Root only; exit 77 (skipped) without root, slurm-wlm (with its pmix
plugin) or munge. Every daemon it started is stopped, its files removed.
LOCO_BUILD_DIR: the build directory."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import launch_test as lt  # noqa: E402

PLUGINS = "/usr/lib/x86_64-linux-gnu/slurm-wlm"


def free_port():
    return lt.free_ports(1)[0]


class Slurm:
    def __init__(self, work):
        self.w = work
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=os.path.join(work,
                                                             "slurm.conf"))

    def daemon(self, argv, name):
        log = open(os.path.join(self.w, name + ".out"), "w")
        self.procs.append(subprocess.Popen(argv, env=self.env,
                                           stdout=log, stderr=log))

    def conf(self):
        w, host = self.w, socket.gethostname()
        for d in ("state", "spool"):
            os.makedirs(os.path.join(w, d))
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(f"""ClusterName=lococi
SlurmctldHost={host}(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket={w}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={w}/state
SlurmdSpoolDir={w}/spool
SlurmctldPidFile={w}/ctld.pid
SlurmdPidFile={w}/d.pid
SlurmctldLogFile={w}/ctld.log
SlurmdLogFile={w}/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=loco1 NodeHostname={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=loco1 Default=YES MaxTime=INFINITE State=UP
""")

    def start(self):
        w = self.w
        self.conf()
        self.daemon(["munged", "-F", "-f", "-S", w + "/munge.sock",
                     "--pid-file=" + w + "/munged.pid",
                     "--log-file=" + w + "/munged.log",
                     "--seed-file=" + w + "/munged.seed"], "munged")
        self.wait(lambda: os.path.exists(w + "/munge.sock"), "munged")
        self.daemon(["slurmctld", "-D"], "slurmctld")
        self.daemon(["slurmd", "-D", "-N", "loco1"], "slurmd")
        self.wait(self.idle, "the node to be idle (sinfo)")

    def idle(self):
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True)
        return r.stdout.strip() == "idle"

    @staticmethod
    def wait(cond, what, limit=60):
        end = time.monotonic() + limit
        while not cond():
            if time.monotonic() > end:
                lt.fail("no %s after %d s" % (what, limit))
            time.sleep(0.2)

    def stop(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def check(slurm):
    os.environ["SLURM_CONF"] = slurm.env["SLURM_CONF"]
    job = lt.Job()
    try:
        conf = os.path.join(job.dir, "multi-prog.conf")
        with open(conf, "w") as f:
            f.write("0 %s\n1-3 %s\n" % (lt.prog("memnode"), " ".join(
                lt.app_argv("transfer", job.dir))))
        export = ",".join(["ALL"] + ["%s=%s" % kv for kv in
                                      sorted(job.env.items())])
        rc, out = lt.run(["srun", "--mpi=pmix", "-n", "4", "--export=" +
                          export, "--multi-prog", conf])
        lt.check_app("transfer", rc, out, job.dir)
        print("slurm_test: ok: srun --multi-prog, transfer conserved")
    finally:
        job.close()
    for app in ("ycsb", "kvstore"):
        job = lt.Job()
        res = os.path.join(job.dir, "results.jsonl")
        try:
            rc, out = lt.run([lt.LOCO_RUN, "--launcher", "srun", "-m", "1",
                              "-n", "3", "--timeout", "200", "--results", res,
                              "--"] + lt.app_argv(app, job.dir))
            lt.check_app(app, rc, out, job.dir)
            with open(res) as f:
                if not any('"scope":"cluster"' in line for line in f):
                    lt.fail("no cluster line in --results")
            print("slurm_test: ok: loco-run --launcher srun, " + app)
        finally:
            job.close()


def main():
    need = ("munged", "slurmctld", "slurmd", "srun", "sinfo")
    if os.geteuid() != 0 or not all(shutil.which(p) for p in need) or \
            not os.path.exists(os.path.join(PLUGINS, "mpi_pmix.so")):
        print("slurm_test: skipped: needs root and slurm-wlm with its pmix "
              "plugin (apt-get install slurm-wlm munge)")
        return 77
    work = tempfile.mkdtemp(prefix="loco-slurm-test-")
    slurm = Slurm(work)
    try:
        slurm.start()
        check(slurm)
    finally:
        slurm.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("slurm_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())

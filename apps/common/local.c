/* SPDX-License-Identifier: MIT */
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/common/rundir.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The private cluster of this process, for the exit handler: a program
 * that leaves by exit() (--help, a fatal error) must not leave its hosts
 * file and run directory behind. */
static struct local_node *active;

static void private_cleanup(struct local_node *ln)
{
	if (ln->hosts[0])
		unlink(ln->hosts);
	if (ln->key[0])
		unlink(ln->key);
	if (ln->run_dir[0])
		rundir_remove_dir(ln->run_dir);  /* and arena files left in it */
	ln->hosts[0] = ln->run_dir[0] = ln->key[0] = 0;
}

static void cleanup_at_exit(void)
{
	if (active)
		private_cleanup(active);
}

/* ---- a private cluster ended by a signal --------------------------------
 * Its files are named by the process (/tmp/loco-local-PID-*, the key
 * /tmp/loco-local-key-PID-*, /dev/shm/loco-local-PID): SIGINT, SIGTERM
 * and SIGHUP remove them before the signal ends the process; what a
 * SIGKILL (or a crash) leaves, the next private cluster of the same user
 * removes once that PID is gone. */

static void cleanup_on_signal(int sig)
{
	struct local_node *ln = active;
	if (ln) {
		if (ln->hosts[0])
			unlink(ln->hosts);
		if (ln->key[0])
			unlink(ln->key);
		if (ln->run_dir[0])
			rundir_remove_dir(ln->run_dir);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* The handler for the signals that would end the process unhandled (an
 * application's own handler is left alone). */
static void cleanup_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	for (unsigned i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old, sa = { .sa_handler = cleanup_on_signal };
		sigemptyset(&sa.sa_mask);
		if (!sigaction(sigs[i], NULL, &old) && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
	}
}

/* PID from NAME = PREFIX "<pid>" then END ('\0' or '-'), else 0. */
static pid_t name_pid(const char *name, const char *prefix, char end)
{
	size_t k = strlen(prefix);
	if (strncmp(name, prefix, k))
		return 0;
	char *e;
	long pid = strtol(name + k, &e, 10);
	return e != name + k && *e == end && pid > 0 ? (pid_t)pid : 0;
}

/* PID's files are another process's to remove while it lives (or an
 * unrelated process's that took its PID: then they stay). */
static bool pid_gone(pid_t pid)
{
	return pid != getpid() && kill(pid, 0) && errno == ESRCH;
}

/* Remove the private clusters' files in DIR (PREFIX<pid><END>...) whose
 * process is gone and that this user owns. */
static void sweep_dir(const char *dir, const char *prefix, char end)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char path[512];
	struct stat st;
	while ((e = readdir(d))) {
		pid_t pid = name_pid(e->d_name, prefix, end);
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (!pid || !pid_gone(pid) || lstat(path, &st) ||
		    st.st_uid != geteuid())
			continue;
		if (S_ISDIR(st.st_mode))
			rundir_remove_dir(path);
		else
			unlink(path);
	}
	closedir(d);
}

static void sweep_gone(void)
{
	sweep_dir("/dev/shm", "loco-local-", '\0');
	sweep_dir("/tmp", "loco-local-", '-');
	sweep_dir("/tmp", "loco-local-key-", '-');
}

static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int port = -1;
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static bool has_opt(int argc, char **argv, const char *opt)
{
	size_t n = strlen(opt);
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strncmp(argv[i], opt, n) && (!argv[i][n] || argv[i][n] == '='))
			return true;
	return false;
}

/* Started as one of several processes by a launcher (mpirun, srun), or
 * told the number of memory nodes: a node of a cluster, not a private
 * one (a lone program under a launcher, size 1, still runs alone). */
static bool launched(int argc, char **argv)
{
	struct loco_launch l;
	char err[256];
	if (has_opt(argc, argv, "--memory-nodes") || getenv("LOCO_MEMORY_NODES"))
		return true;
	if (has_opt(argc, argv, "--id") || getenv("LOCO_NODE_ID"))
		return false;
	/* A malformed launch environment: let loco_opts_parse name it. */
	return loco_launch_identity(&l, err, sizeof(err)) ||
	       l.size > 1 || (l.launcher && !l.size);
}

/* A fresh cluster key (32 random bytes, mode 0600 from mkstemp) at
 * ln->key: 0 or -1 (nothing left behind). */
static int private_key(struct local_node *ln)
{
	unsigned char k[32];
	snprintf(ln->key, sizeof(ln->key), "/tmp/loco-local-key-%d-XXXXXX",
		 (int)getpid());
	int fd = mkstemp(ln->key);
	bool ok = fd >= 0 && getrandom(k, sizeof(k), 0) == (ssize_t)sizeof(k) &&
		  write(fd, k, sizeof(k)) == (ssize_t)sizeof(k);
	if (fd >= 0)
		close(fd);
	if (!ok && fd >= 0)
		unlink(ln->key);
	if (!ok)
		ln->key[0] = 0;
	return ok ? 0 : -1;
}

/* Write a one-node hosts file and a cluster key, pick a private run directory, and point
 * the LOCO_* environment at them (TRANSPORT only if not chosen already). */
static int private_cluster(struct local_node *ln, const char *transport)
{
	sweep_gone();
	int port = free_port();
	snprintf(ln->hosts, sizeof(ln->hosts), "/tmp/loco-local-%d-XXXXXX",
		 (int)getpid());
	int fd = port > 0 ? mkstemp(ln->hosts) : -1;
	if (fd < 0) {
		ln->hosts[0] = 0;
		return -1;
	}
	dprintf(fd, "0 127.0.0.1:%d compute\n", port);
	close(fd);
	if (private_key(ln))
		return -1;
	snprintf(ln->run_dir, sizeof(ln->run_dir), "/dev/shm/loco-local-%d",
		 (int)getpid());
	setenv("LOCO_RUN_DIR", ln->run_dir, 1);
	setenv("LOCO_HOSTS", ln->hosts, 1);
	setenv("LOCO_CLUSTER_KEY", ln->key, 1);
	setenv("LOCO_NODE_ID", "0", 1);
	if (transport)
		setenv("LOCO_TRANSPORT", transport, 1);
	return 0;
}

int local_node_start(struct local_node *ln, int *argc, char **argv,
		     const char *prog, const char *default_transport)
{
	char err[512];
	struct loco_opts o;
	memset(ln, 0, sizeof(*ln));
	bool clustered = getenv("LOCO_HOSTS") || has_opt(*argc, argv, "--hosts") ||
			 launched(*argc, argv);
	const char *tp = has_opt(*argc, argv, "--transport") ||
			 getenv("LOCO_TRANSPORT") ? NULL : default_transport;
	if (!clustered && private_cluster(ln, tp)) {
		private_cleanup(ln);
		fprintf(stderr, "%s: cannot set up a private one-node cluster\n",
			prog);
		return 1;
	}
	if (!clustered) {
		static bool registered;
		active = ln;
		if (!registered && !atexit(cleanup_at_exit))
			registered = true;
		cleanup_signals();
	}
	if (loco_opts_parse(&o, argc, argv, err, sizeof(err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		local_node_stop(ln);
		return 2;
	}
	if (loco_mgr_create(&o, &ln->mgr)) {
		local_node_stop(ln);
		return 1;
	}
	ln->arena_bytes = o.arena_bytes;
	const struct loco_host *self = &loco_mgr_hosts(ln->mgr)->node[o.node_id];
	if (o.launch.launcher && self->role != LOCO_ROLE_COMPUTE) {
		fprintf(stderr, "%s: rank %d is a %s node (%s): run loco-memnode "
			"there (mpirun -np M loco-memnode : -np N %s)\n", prog,
			o.node_id, loco_role_name(self->role),
			loco_mgr_hosts(ln->mgr)->path, prog);
		local_node_stop(ln);
		return 2;
	}
	return 0;
}

void local_node_stop(struct local_node *ln)
{
	loco_mgr_destroy(ln->mgr);
	ln->mgr = NULL;
	private_cleanup(ln);
	if (active == ln)
		active = NULL;
}

int local_main(const struct local_prog *p, void *arg, int argc, char **argv)
{
	struct local_node ln;
	if (bench_wants_help(argc, argv)) {   /* no cluster just for usage */
		p->usage(stdout);
		return 0;
	}
	int rc = local_node_start(&ln, &argc, argv, p->name,
				  p->transport ? p->transport : "shm");
	if (rc)
		return rc;
	rc = p->parse(arg, argc, argv);
	if (rc) {
		p->usage(rc == 1 ? stdout : stderr);
		local_node_stop(&ln);
		return rc == 1 ? 0 : 2;
	}
	rc = p->run(arg, ln.mgr);
	if (rc)
		fprintf(stderr, "%s: %s\n", p->name, loco_strerror(rc));
	local_node_stop(&ln);
	return rc ? 1 : 0;
}

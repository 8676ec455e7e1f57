/* SPDX-License-Identifier: MIT */
/* The manager: one per process. Loads the hosts file, opens the transport
 * and its arena, runs the control plane and the join worker. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/random.h>

#include <loco/history.h>
#include "loco/boot.h"
#include "loco/fault.h"
#include "loco/internal.h"
#include "loco/transport/durable.h"

uint32_t loco_mgr_id(const struct loco_mgr *mgr) { return mgr->id; }
const struct loco_hosts *loco_mgr_hosts(const struct loco_mgr *mgr) { return &mgr->hosts; }
const char *loco_mgr_transport(const struct loco_mgr *mgr) { return mgr->tp_ops->name; }
int loco_mgr_timeout_ms(const struct loco_mgr *mgr) { return mgr->opts.timeout_ms; }

uint64_t loco_mgr_compute_peers(const struct loco_mgr *mgr)
{
	uint64_t m = 0;
	for (uint32_t i = 0; i <= mgr->hosts.max_id; i++)
		if (mgr->hosts.node[i].present && i != mgr->id &&
		    mgr->hosts.node[i].role == LOCO_ROLE_COMPUTE)
			m |= UINT64_C(1) << i;
	return m;
}

int loco_mgr_first_memnode(const struct loco_mgr *mgr)
{
	for (uint32_t i = 0; i <= mgr->hosts.max_id; i++)
		if (mgr->hosts.node[i].present &&
		    mgr->hosts.node[i].role == LOCO_ROLE_MEMORY)
			return (int)i;
	return -ENOENT;
}

/* LOCO_RUN_DIR, or a directory derived from the user and hosts file so
 * that nodes started by hand with the same file meet. */
static void run_dir_pick(struct loco_mgr *mgr)
{
	const char *env = getenv("LOCO_RUN_DIR");
	if (env && *env) {
		snprintf(mgr->run_dir, sizeof(mgr->run_dir), "%s", env);
		return;
	}
	char real[LOCO_PATH_MAX];
	const char *p = realpath(mgr->hosts.path, real) ? real : mgr->hosts.path;
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	snprintf(mgr->run_dir, sizeof(mgr->run_dir), "/dev/shm/loco-u%u-%016llx",
		 (unsigned)geteuid(), (unsigned long long)h);
}

static void locks_init(struct loco_mgr *mgr)
{
	pthread_mutexattr_t rec;
	pthread_mutexattr_init(&rec);
	pthread_mutexattr_settype(&rec, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&mgr->alloc_lock, &rec);
	pthread_mutex_init(&mgr->chan_lock, &rec);
	pthread_mutexattr_destroy(&rec);
	pthread_mutex_init(&mgr->peer_lock, NULL);
	pthread_mutex_init(&mgr->ropen_lock, NULL);
	pthread_mutex_init(&mgr->mirror_lock, NULL);
	pthread_mutex_init(&mgr->fence_lock, NULL);
	mgr->mirror_node = LOCO_MAX_NODES;
	for (uint32_t i = 0; i < LOCO_MAX_NODES; i++)
		atomic_init(&mgr->route[i], i);
	mgr->keeper_pipe[0] = mgr->keeper_pipe[1] = -1;
	pthread_mutex_init(&mgr->thr_lock, NULL);
	loco_rtab_init(mgr);
	pthread_mutex_init(&mgr->job_lock, NULL);
	pthread_cond_init(&mgr->job_cond, NULL);
	mgr->listen_fd = -1;
	mgr->wake_pipe[0] = mgr->wake_pipe[1] = -1;
	/* Here, not in loco_ctrl_start: a manager that fails before the
	 * control plane starts must not close descriptor 0 on the way out. */
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		mgr->out[i].fd = -1;
		pthread_mutex_init(&mgr->out[i].lock, NULL);
	}
}

static void locks_fini(struct loco_mgr *mgr)
{
	pthread_mutex_destroy(&mgr->alloc_lock);
	pthread_mutex_destroy(&mgr->chan_lock);
	pthread_mutex_destroy(&mgr->peer_lock);
	pthread_mutex_destroy(&mgr->ropen_lock);
	pthread_mutex_destroy(&mgr->mirror_lock);
	pthread_mutex_destroy(&mgr->fence_lock);
	pthread_mutex_destroy(&mgr->thr_lock);
	loco_rtab_fini(mgr);
	pthread_mutex_destroy(&mgr->job_lock);
	pthread_cond_destroy(&mgr->job_cond);
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++)
		pthread_mutex_destroy(&mgr->out[i].lock);
}

/* The cluster key, or --insecure (warned); neither refuses to start. */
static int auth_config(struct loco_mgr *mgr, const struct loco_opts *opts)
{
	char err[LOCO_PATH_MAX + 128];
	if (opts->cluster_key[0]) {
		int rc = loco_auth_init();
		if (rc)
			snprintf(err, sizeof(err), "cannot initialise libsodium");
		else
			rc = loco_key_load(opts->cluster_key, mgr->key, err,
					   sizeof(err));
		if (rc)
			loco_err("mgr", "%s", err);
		mgr->keyed = !rc;
		return rc;
	}
	if (!opts->insecure) {
		loco_err("mgr", "no cluster key: pass --cluster-key FILE or set "
			 "LOCO_CLUSTER_KEY (%d random bytes, mode 0600; loco-run "
			 "makes one), or --insecure to run without", LOCO_KEY_LEN);
		return -LOCO_EAUTH;
	}
	return 0;
}

static void insecure_warn(struct loco_mgr *mgr)
{
	const struct loco_host *self = &mgr->hosts.node[mgr->id];
	loco_warn("mgr", "node %u runs --insecure: without a cluster key, any "
		  "process that reaches %s:%u can read and write its memory",
		  mgr->id, self->host, self->port);
}

/* The hosts table: the file, else (after the key, so that a node without
 * one fails before the others wait for it) PMIx's exchange. */
static int hosts_config(struct loco_mgr *mgr, const struct loco_opts *opts)
{
	char err[LOCO_PATH_MAX + 256];
	if (!opts->hosts_path[0]) {
		int rc = auth_config(mgr, opts);
		return rc ? rc : loco_boot_pmix(mgr);
	}
	int rc = loco_hosts_load(opts->hosts_path, &mgr->hosts, err, sizeof(err));
	if (!rc)
		rc = loco_hosts_check_self(&mgr->hosts, opts->node_id, err,
					   sizeof(err));
	if (!rc && opts->launch.size &&
	    mgr->hosts.count != (uint32_t)opts->launch.size) {
		snprintf(err, sizeof(err), "%s has %u nodes, but the launcher "
			 "started %d processes (%s)", mgr->hosts.path,
			 mgr->hosts.count, opts->launch.size, opts->launch.from);
		rc = -LOCO_EHOSTS;
	}
	if (rc)
		loco_err("mgr", "%s", err);
	return rc;
}

static int load_config(struct loco_mgr *mgr, const struct loco_opts *opts)
{
	mgr->opts = *opts;
	mgr->id = (uint32_t)opts->node_id;
	loco_log_set_node(opts->node_id);
	int rc = hosts_config(mgr, opts);
	if (rc)
		return rc;
	mgr->tp_ops = loco_transport_find(opts->transport);
	if (!mgr->tp_ops) {
		const char *why = loco_transport_absent(opts->transport);
		loco_err("mgr", "transport '%s' is not available: %s",
			 opts->transport, why ? why : "not in this build");
		return -EPROTONOSUPPORT;
	}
	run_dir_pick(mgr);
	rc = loco_mirror_check(mgr);
	if (!rc && opts->hosts_path[0])
		rc = auth_config(mgr, opts);
	if (!rc && !mgr->keyed)
		insecure_warn(mgr);
	return rc;
}

static int transport_open(struct loco_mgr *mgr)
{
	const struct loco_opts *o = &mgr->opts;
	struct loco_tp_config cfg = {
		.node_id = mgr->id,
		.arena_bytes = o->arena_bytes,
		.run_dir = mgr->run_dir,
		.timeout_ms = o->timeout_ms,
		.hosts = &mgr->hosts,
		.durable_dir = o->durable_dir[0] ? o->durable_dir : NULL,
		.power_cut = o->power_cut,
		.dsync = o->durable_dir[0] ? loco_dsync_from_env() : 0,
		.image_id = mgr->image_id,
		.incarnation = mgr->boot_id,
		.mirror = o->mirror && !loco_mirror_taken(mgr),
	};
	if (cfg.dsync < 0)
		return -EINVAL;
	int rc = mgr->tp_ops->open(&cfg, &mgr->tp);
	if (rc)
		return rc;  /* the transport logged why */
	mgr->arena = mgr->tp_ops->arena_base(mgr->tp);
	mgr->arena_len = mgr->tp_ops->arena_len(mgr->tp);
	mgr->dm_len = mgr->tp_ops->dm_len(mgr->tp);
	mgr->desc_len = sizeof(mgr->desc);
	rc = mgr->tp_ops->arena_desc(mgr->tp, mgr->desc, &mgr->desc_len);
	struct loco_hello self;
	loco_hello_self(mgr, &self);
	if (!rc)
		rc = loco_peer_add(mgr, &self, true);
	if (rc)
		loco_err("mgr", "cannot attach this node's own arena: %s",
			 loco_strerror(rc));
	return rc;
}

int loco_mgr_create(const struct loco_opts *opts, struct loco_mgr **out)
{
	struct loco_mgr *mgr = calloc(1, sizeof(*mgr));
	if (!mgr)
		return -ENOMEM;
	locks_init(mgr);
	int rc = load_config(mgr, opts);
	if (!rc)
		rc = loco_faults_start(mgr);
	if (getrandom(&mgr->boot_id, sizeof(mgr->boot_id), 0) !=
	    sizeof(mgr->boot_id))
		mgr->boot_id = (uint64_t)getpid() << 32 ^ loco_now_ns();
	if (!mgr->boot_id)
		mgr->boot_id = 1;
	if (!rc)
		rc = loco_lease_skew_check();
	if (!rc)
		loco_fenced_load(mgr);
	if (!rc && opts->durable_dir[0])
		rc = loco_regions_load(mgr);
	if (!rc)
		rc = transport_open(mgr);
	if (!rc && opts->durable_dir[0])
		rc = loco_regions_publish(mgr);
	/* A node that cannot bind its threads still works (warned). */
	if (!rc && opts->cpu_bind == LOCO_CPU_BIND_CORE)
		loco_affinity_open(mgr, &mgr->aff);
	if (!rc)
		rc = loco_ctrl_start(mgr);
	const char *hist = getenv("LOCO_HISTORY");
	if (!rc && hist && *hist)
		rc = loco_history_open(mgr, hist);
	if (!rc && (rc = loco_joiner_start(mgr)))
		loco_err("mgr", "cannot start the join worker: %s",
			 loco_strerror(rc));
	if (!rc && (rc = loco_peers_start(mgr)))
		loco_err("mgr", "cannot start the peer keeper: %s",
			 loco_strerror(rc));
	if (!rc && (rc = loco_mirror_start(mgr)))
		loco_err("mgr", "cannot start joining node %u as its mirror: %s",
			 opts->mirror_of, loco_strerror(rc));
	if (rc) {
		/* Each step logged its own reason. */
		loco_mgr_destroy(mgr);
		return rc;
	}
	mgr->created = true;
	*out = mgr;
	return 0;
}

void loco_mgr_destroy(struct loco_mgr *mgr)
{
	if (!mgr)
		return;
	loco_faults_stop(mgr);
	loco_joiner_stop(mgr);
	loco_peers_stop(mgr);
	loco_mirror_stop(mgr);
	/* While this node still serves its memory: a memory node of a PMIx
	 * job serves until every node has passed this point. */
	loco_boot_fini(mgr, mgr->created);
	loco_ctrl_stop(mgr);
	loco_peers_fini(mgr);
	loco_thread_retire_all(mgr);
	loco_history_close(mgr);
	loco_arena_free_all(mgr);
	loco_affinity_close(mgr->aff);
	if (mgr->tp)
		mgr->tp_ops->close(mgr->tp);
	locks_fini(mgr);
	explicit_bzero(mgr->key, sizeof(mgr->key));
	free(mgr);
}

static volatile sig_atomic_t serve_signal;

static void serve_on_signal(int sig)
{
	serve_signal = sig;
}

int loco_mgr_serve(struct loco_mgr *mgr, int timeout_ms)
{
	struct sigaction sa = { .sa_handler = serve_on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	uint64_t deadline = timeout_ms >= 0 ? loco_deadline(timeout_ms) : UINT64_MAX;
	loco_boot_end_start(mgr);
	while (!serve_signal && !loco_boot_ended(mgr) &&
	       loco_now_ns() < deadline) {
		struct timespec ts = { 0, 20000000 };
		nanosleep(&ts, NULL);
	}
	if (serve_signal)
		loco_info("mgr", "node %u stopping on signal %d", mgr->id,
			  (int)serve_signal);
	else if (loco_boot_ended(mgr))
		loco_info("mgr", "node %u stopping: every node of the job is "
			  "done", mgr->id);
	return 0;
}

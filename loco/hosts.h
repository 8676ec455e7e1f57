/* SPDX-License-Identifier: MIT */
/* Hosts file and node options.
 *
 * Hosts file: one node per line, `ID HOST:PORT ROLE [KEY=VALUE]...`, ROLE
 * is `compute` or `memory` (optional, default compute). `#` starts a
 * comment; blank lines are ignored. IDs are 0..LOCO_MAX_NODES-1, unique;
 * HOST is an IPv4 address or a name (at most LOCO_HOST_MAX-1 bytes), PORT
 * 1..65535. The optional KEY=VALUE fields are per-node transport settings
 * (enum loco_host_opt; each at most once, values below LOCO_HOST_OPT_MAX
 * bytes): the verbs transport reads them as defaults for its LOCO_VERBS_*
 * variables (docs/verbs.md). */
#ifndef LOCO_HOSTS_H
#define LOCO_HOSTS_H

#include <stddef.h>
#include <stdint.h>
#include <limits.h>

#define LOCO_PATH_MAX 4096

#define LOCO_MAX_NODES 64
#define LOCO_HOST_MAX 64

/* A mirror is a memory node that keeps a copy of another's durable image
 * (loco-memnode --mirror-of ID) and serves it after a fail-over; programs
 * do not place data on it (docs/durability.md, "Mirrors"). */
enum loco_role { LOCO_ROLE_COMPUTE = 0, LOCO_ROLE_MEMORY = 1,
		 LOCO_ROLE_MIRROR = 2 };

/* Per-node transport settings a hosts-file line may carry. */
enum loco_host_opt {
	LOCO_HOPT_RDMA_DEV,      /* rdma_dev=NAME   (LOCO_VERBS_DEVICE) */
	LOCO_HOPT_RDMA_PORT,     /* rdma_port=N     (LOCO_VERBS_PORT) */
	LOCO_HOPT_GID_INDEX,     /* gid_index=N     (LOCO_VERBS_GID_INDEX) */
	LOCO_HOPT_MTU,           /* mtu=BYTES       (LOCO_VERBS_MTU) */
	LOCO_HOPT_DM_BYTES,      /* dm_bytes=BYTES  (LOCO_VERBS_DM_BYTES) */
	LOCO_HOPT_NR
};
#define LOCO_HOST_OPT_MAX 64

struct loco_host {
	uint32_t id;
	uint16_t port;
	uint8_t role;            /* enum loco_role */
	uint8_t present;         /* 1 if this id appears in the file */
	uint32_t line;           /* its line in the file */
	char host[LOCO_HOST_MAX];
	char opt[LOCO_HOPT_NR][LOCO_HOST_OPT_MAX]; /* "" = not given */
};

/* The KEY of setting OPT ("rdma_dev", ...), or NULL if out of range. */
const char *loco_host_opt_name(enum loco_host_opt opt);

struct loco_hosts {
	struct loco_host node[LOCO_MAX_NODES]; /* indexed by id */
	uint32_t count;                        /* number of present ids */
	uint32_t max_id;                       /* largest present id */
	char path[LOCO_PATH_MAX];
};

/* Parse TEXT (the contents of file PATH, used in messages only).
 * On error returns -LOCO_EHOSTS and writes "PATH:LINE: reason" into ERR. */
int loco_hosts_parse(const char *path, const char *text, struct loco_hosts *out,
		     char *err, size_t errlen);

/* Read and parse the file at PATH (errors as above; an unreadable file is
 * "PATH: cannot open: <strerror>"). */
int loco_hosts_load(const char *path, struct loco_hosts *out, char *err,
		    size_t errlen);

/* 0 if node ID is present in HOSTS; otherwise -LOCO_EHOSTS with
 * "PATH: node id ID is not in the file" (or "... is out of range") in ERR. */
int loco_hosts_check_self(const struct loco_hosts *hosts, int id, char *err,
			  size_t errlen);

/* Human name of a role ("compute", "memory"). */
const char *loco_role_name(enum loco_role role);

/* Thread placement (--cpu-bind / LOCO_CPU_BIND). */
enum loco_cpu_bind {
	LOCO_CPU_BIND_NONE = 0, /* leave threads where the OS puts them */
	LOCO_CPU_BIND_CORE = 1, /* loco_thread_create binds its caller to a core */
};

/* Who started this node when no --id was given (loco_launch_identity). */
enum loco_launcher {
	LOCO_LAUNCHER_NONE = 0,  /* --id / LOCO_NODE_ID, or nothing */
	LOCO_LAUNCHER_OMPI,      /* OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE */
	LOCO_LAUNCHER_PMIX,      /* PMIX_RANK (the size comes from PMIx) */
	LOCO_LAUNCHER_SLURM,     /* SLURM_PROCID, SLURM_NTASKS */
};

struct loco_launch {
	int launcher;            /* enum loco_launcher */
	int rank;                /* this process's rank; -1 without a launcher */
	int size;                /* processes in the job; 0 if not known yet */
	int pmix;                /* PMIX_RANK is set: a PMIx server started us */
	char from[64];           /* the variables, for messages:
				  * "OMPI_COMM_WORLD_RANK=2" */
};

/* This process's rank and job size from its launcher's environment:
 * Open MPI's OMPI_COMM_WORLD_RANK/SIZE first, then PMIX_RANK, then Slurm's
 * SLURM_PROCID/SLURM_NTASKS (last: an sbatch script's own variables reach
 * an mpirun started inside it). OUT->launcher is LOCO_LAUNCHER_NONE if none
 * is set. Returns 0, or -EINVAL with the reason in ERR (a malformed
 * number, a rank beyond the size, a size above LOCO_MAX_NODES). */
int loco_launch_identity(struct loco_launch *out, char *err, size_t errlen);

/* Node options, from the command line first, then the environment. */
struct loco_opts {
	int node_id;                 /* --id N / LOCO_NODE_ID; -1 if unset */
	char hosts_path[LOCO_PATH_MAX];   /* --hosts FILE / LOCO_HOSTS */
	char transport[32];          /* --transport T / LOCO_TRANSPORT; default "shm" */
	int timeout_ms;              /* --timeout-ms / LOCO_TIMEOUT_MS; default 10000 */
	uint64_t arena_bytes;        /* --arena-mb / LOCO_ARENA_MB; default 256 MiB */
	int cpu_bind;                /* --cpu-bind / LOCO_CPU_BIND: enum loco_cpu_bind;
				      * default none */
	char cluster_key[LOCO_PATH_MAX]; /* --cluster-key FILE / LOCO_CLUSTER_KEY:
				      * 32 secret bytes shared by the cluster */
	int insecure;                /* --insecure / LOCO_INSECURE=1: run without
				      * a key (warned); refused otherwise */
	char durable_dir[LOCO_PATH_MAX]; /* --durable DIR / LOCO_DURABLE_DIR: the
				      * arena and its region names live in DIR
				      * and survive restarts ("" = volatile) */
	int power_cut;               /* --power-cut / LOCO_POWER_CUT=1: a kill
				      * is a power cut: what was not persisted
				      * is lost (needs --durable; shm only) */
	int mirror;                  /* --mirror-of ID / LOCO_MIRROR_OF given */
	uint32_t mirror_of;          /* ...: this node (role mirror) keeps a copy
				      * of memory node ID's durable image
				      * (needs --durable; shm, shm-weak) */
	int memory_nodes;            /* --memory-nodes M / LOCO_MEMORY_NODES:
				      * without a hosts file, ranks 0..M-1 serve
				      * memory and the rest compute; -1 if unset */
	int role;                    /* the role this program serves without a
				      * hosts file (enum loco_role; loco-memnode
				      * sets memory); -1: what --memory-nodes
				      * gives, else compute. Not parsed. */
	struct loco_launch launch;   /* the launcher's identity, when node_id
				      * came from it (launch.launcher != NONE) */
};

/* Fill OPTS from ARGV and the environment. Recognised options (`--id N`,
 * `--id=N`, `--hosts F`, `--transport T`, `--timeout-ms MS`, `--arena-mb MB`,
 * `--cpu-bind none|core`, `--cluster-key F`, `--insecure`, `--durable DIR`,
 * `--power-cut`, `--mirror-of ID`, `--memory-nodes M`) are removed from ARGV
 * and *ARGC updated, so the program parses the rest. --power-cut needs
 * --durable. Without --id, the id is the launcher's rank
 * (loco_launch_identity). Without a hosts file, the nodes find each other
 * through PMIx (PMIX_RANK must be set; loco_mgr_create does the exchange).
 * Returns 0, or -EINVAL with "what is wrong" in ERR (bad number, missing
 * value, unknown transport or CPU binding, missing id or hosts file, M not
 * below the job's size). Whether a key or --insecure was given is checked
 * by loco_mgr_create, not here. */
int loco_opts_parse(struct loco_opts *opts, int *argc, char **argv, char *err,
		    size_t errlen);

#endif

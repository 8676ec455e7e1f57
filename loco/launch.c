/* SPDX-License-Identifier: MIT */
/* A node's identity from the launcher that started it (hosts.h). */
#include <loco/hosts.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In order of trust: Open MPI's own variables; PMIx's rank (srun
 * --mpi=pmix, prterun); Slurm's last, since an sbatch script's
 * SLURM_PROCID=0 reaches every process of an mpirun started inside it. */
static const struct source {
	int launcher;
	const char *rank, *size;  /* size NULL: PMIx gives it */
} sources[] = {
	{ LOCO_LAUNCHER_OMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
	{ LOCO_LAUNCHER_PMIX, "PMIX_RANK", NULL },
	{ LOCO_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_NTASKS" },
};

/* Variable NAME as a decimal number 0..INT_MAX into *OUT. */
static int env_num(const char *name, const char *s, int *out, char *err,
		   size_t errlen)
{
	char *end;
	errno = 0;
	long v = isdigit((unsigned char)s[0]) ? strtol(s, &end, 10) : -1;
	if (v < 0 || errno || *end || v > 0x7fffffff) {
		snprintf(err, errlen, "%s: bad value '%s' (expected a number)",
			 name, s);
		return -EINVAL;
	}
	*out = (int)v;
	return 0;
}

static const char *env_set(const char *name)
{
	const char *v = name ? getenv(name) : NULL;
	return v && *v ? v : NULL;
}

/* Rank and size from source SRC, whose rank variable is set. */
static int from_source(const struct source *src, struct loco_launch *l,
		       char *err, size_t errlen)
{
	const char *size = env_set(src->size);
	int rc = env_num(src->rank, env_set(src->rank), &l->rank, err, errlen);
	if (rc)
		return rc;
	snprintf(l->from, sizeof(l->from), "%s=%d", src->rank, l->rank);
	l->launcher = src->launcher;
	if (!src->size)
		return 0;
	if (!size) {
		snprintf(err, errlen, "%s is set but %s is not: not a complete "
			 "launch environment", src->rank, src->size);
		return -EINVAL;
	}
	if ((rc = env_num(src->size, size, &l->size, err, errlen)))
		return rc;
	if (l->rank >= l->size) {
		snprintf(err, errlen, "rank %d is beyond the job's size %d "
			 "(%s=%d, %s=%d)", l->rank, l->size, src->rank, l->rank,
			 src->size, l->size);
		return -EINVAL;
	}
	return 0;
}

int loco_launch_identity(struct loco_launch *out, char *err, size_t errlen)
{
	struct loco_launch l = { .rank = -1, .pmix = env_set("PMIX_RANK") != NULL };
	for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
		if (!env_set(sources[i].rank))
			continue;
		int rc = from_source(&sources[i], &l, err, errlen);
		if (rc)
			return rc;
		break;
	}
	if (l.size > LOCO_MAX_NODES || l.rank >= LOCO_MAX_NODES) {
		snprintf(err, errlen, "%s: the job has %d processes; loco runs "
			 "at most %d nodes", l.from, l.size > l.rank ? l.size :
			 l.rank + 1, LOCO_MAX_NODES);
		return -EINVAL;
	}
	*out = l;
	return 0;
}

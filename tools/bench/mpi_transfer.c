/* SPDX-License-Identifier: MIT */
/* loco-mpi-transfer: the OpenMPI RMA baseline of loco-transfer (LOCO §7.1,
 * Fig. 4), built by tools/bench with mpicc when it exists.
 *
 * Accounts live in --windows windows (MPI_Win_allocate) on every rank:
 * account I is in window I mod W at rank (I / W) mod P, element I / (W P).
 * A window's lock at a rank guards the accounts there, so the program
 * has W x P locks (pass loco-transfer --locks W x P to compare). A
 * transfer locks the two accounts' (window, rank) pairs exclusively in a
 * fixed order (once if they are the same), MPI_Gets both balances,
 * flushes, MPI_Puts the new balances and unlocks both (which completes
 * the puts). --single-lock keeps every account in window 0 at rank 0:
 * each transfer holds that one lock (Fig. 4, left).
 *
 * Rank 0 prints one JSON line like loco-transfer's cluster line, with the
 * initial and final totals, "conserved", and the fewest and most
 * transfers a rank made (passive-target locks need not be fair). */
#include <getopt.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WINDOWS 341       /* OpenMPI's limit the paper ran into */
#define LAT_CAP (1u << 20)

struct opts {
	uint64_t accounts, balance, max_amount, seed;
	unsigned windows;
	double duration;
	bool single;
	const char *label;
};

struct state {
	struct opts o;
	int rank, nprocs;
	unsigned nwin;
	uint64_t per;               /* elements per window per rank */
	MPI_Win win[MAX_WINDOWS];
	uint64_t *base[MAX_WINDOWS];
	uint64_t rng, ops;
	uint64_t *lat;
	size_t nlat;
};

/* An account's place. */
struct where {
	unsigned w;
	int r;
	MPI_Aint disp;
};

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

static struct where where_of(const struct state *s, uint64_t i)
{
	if (s->o.single)
		return (struct where){ 0, 0, (MPI_Aint)i };
	uint64_t wp = (uint64_t)s->nwin * (uint64_t)s->nprocs;
	return (struct where){ (unsigned)(i % s->nwin),
			       (int)(i / s->nwin % (uint64_t)s->nprocs),
			       (MPI_Aint)(i / wp) };
}

static int parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "accounts", required_argument, NULL, 'a' },
		{ "windows", required_argument, NULL, 'w' },
		{ "duration", required_argument, NULL, 'd' },
		{ "balance", required_argument, NULL, 'b' },
		{ "max-amount", required_argument, NULL, 'm' },
		{ "seed", required_argument, NULL, 's' },
		{ "single-lock", no_argument, NULL, '1' },
		{ "label", required_argument, NULL, 'L' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'a': o->accounts = strtoull(optarg, NULL, 10); break;
		case 'w': o->windows = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': o->duration = strtod(optarg, NULL); break;
		case 'b': o->balance = strtoull(optarg, NULL, 10); break;
		case 'm': o->max_amount = strtoull(optarg, NULL, 10); break;
		case 's': o->seed = strtoull(optarg, NULL, 10); break;
		case '1': o->single = true; break;
		case 'L': o->label = optarg; break;
		default: return -1;
		}
	}
	if (o->accounts < 2 || !o->windows || o->windows > MAX_WINDOWS ||
	    !(o->duration > 0) || !o->max_amount)
		return -1;
	return 0;
}

static int windows_create(struct state *s)
{
	s->nwin = s->o.single ? 1 : s->o.windows;
	uint64_t wp = (uint64_t)s->nwin * (uint64_t)s->nprocs;
	s->per = s->o.single ? s->o.accounts : (s->o.accounts + wp - 1) / wp;
	for (unsigned w = 0; w < s->nwin; w++) {
		MPI_Aint bytes = (MPI_Aint)(s->per * sizeof(uint64_t));
		if (MPI_Win_allocate(bytes, sizeof(uint64_t), MPI_INFO_NULL,
				     MPI_COMM_WORLD, &s->base[w], &s->win[w]))
			return -1;
	}
	return 0;
}

/* Set the balances this rank hosts (an exclusive epoch on itself). */
static void accounts_fill(struct state *s)
{
	for (uint64_t i = 0; i < s->o.accounts; i++) {
		struct where at = where_of(s, i);
		if (at.r != s->rank)
			continue;
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, s->rank, 0, s->win[at.w]);
		s->base[at.w][at.disp] = s->o.balance;
		MPI_Win_unlock(s->rank, s->win[at.w]);
	}
	MPI_Barrier(MPI_COMM_WORLD);
}

/* The total of every rank's accounts, at rank 0. */
static uint64_t accounts_total(struct state *s)
{
	uint64_t mine = 0, total = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (uint64_t i = 0; i < s->o.accounts; i++) {
		struct where at = where_of(s, i);
		if (at.r != s->rank)
			continue;
		MPI_Win_lock(MPI_LOCK_SHARED, s->rank, 0, s->win[at.w]);
		mine += s->base[at.w][at.disp];
		MPI_Win_unlock(s->rank, s->win[at.w]);
	}
	MPI_Reduce(&mine, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
	return total;
}

static double now_s(void)
{
	return MPI_Wtime();
}

static void transfer(struct state *s)
{
	uint64_t n = s->o.accounts, a = rng_next(&s->rng) % n;
	uint64_t b = rng_next(&s->rng) % (n - 1), bal[2];
	b += b >= a;
	uint64_t amount = rng_next(&s->rng) % (s->o.max_amount + 1);
	struct where wa = where_of(s, a), wb = where_of(s, b);
	uint64_t ka = (uint64_t)wa.w * (uint64_t)s->nprocs + (uint64_t)wa.r;
	uint64_t kb = (uint64_t)wb.w * (uint64_t)s->nprocs + (uint64_t)wb.r;
	struct where first = ka <= kb ? wa : wb, second = ka <= kb ? wb : wa;
	MPI_Win_lock(MPI_LOCK_EXCLUSIVE, first.r, 0, s->win[first.w]);
	if (ka != kb)
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, second.r, 0, s->win[second.w]);
	MPI_Get(&bal[0], 1, MPI_UINT64_T, wa.r, wa.disp, 1, MPI_UINT64_T, s->win[wa.w]);
	MPI_Get(&bal[1], 1, MPI_UINT64_T, wb.r, wb.disp, 1, MPI_UINT64_T, s->win[wb.w]);
	MPI_Win_flush(wa.r, s->win[wa.w]);
	MPI_Win_flush(wb.r, s->win[wb.w]);
	if (amount > bal[0])
		amount = bal[0];
	bal[0] -= amount;
	bal[1] += amount;
	MPI_Put(&bal[0], 1, MPI_UINT64_T, wa.r, wa.disp, 1, MPI_UINT64_T, s->win[wa.w]);
	MPI_Put(&bal[1], 1, MPI_UINT64_T, wb.r, wb.disp, 1, MPI_UINT64_T, s->win[wb.w]);
	if (ka != kb)
		MPI_Win_unlock(second.r, s->win[second.w]);
	MPI_Win_unlock(first.r, s->win[first.w]);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

static double pct_us(struct state *s, double p)
{
	if (!s->nlat)
		return 0;
	return (double)s->lat[(size_t)(p / 100 * (double)(s->nlat - 1) + 0.5)] / 1000;
}

/* The measured loop. Neither inlined nor cloned: tools/bench/opcount
 * --transfer counts its instructions under callgrind by its name. */
__attribute__((noinline, noclone))
static void run(struct state *s, double *secs)
{
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now_s(), end = t0 + s->o.duration, t;
	while ((t = now_s()) < end) {
		transfer(s);
		if (s->nlat < LAT_CAP)
			s->lat[s->nlat++] = (uint64_t)((now_s() - t) * 1e9);
		s->ops++;
	}
	*secs = now_s() - t0;
}

static void report(struct state *s, double secs, uint64_t initial,
		   uint64_t final)
{
	double mine[3] = { secs, pct_us(s, 50), pct_us(s, 99) }, all[3];
	uint64_t ops = 0, lo = 0, hi = 0, expected = s->o.accounts * s->o.balance;
	MPI_Reduce(&s->ops, &ops, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&s->ops, &lo, 1, MPI_UINT64_T, MPI_MIN, 0, MPI_COMM_WORLD);
	MPI_Reduce(&s->ops, &hi, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Reduce(mine, all, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (s->rank)
		return;
	printf("{\"app\":\"mpi-transfer\",\"transport\":\"%s\",\"nodes\":%d,"
	       "\"threads\":1,\"duration_s\":%.3f,\"ops\":%" PRIu64
	       ",\"ops_per_s\":%.1f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
	       "\"verbs_per_op\":null,\"rtts_per_op\":null,\"scope\":\"cluster\","
	       "\"clients\":%d,\"mode\":\"%s\",\"accounts\":%" PRIu64 ",\"locks\":%"
	       PRIu64 ",\"initial_total\":%" PRIu64 ",\"final_total\":%" PRIu64
	       ",\"expected_total\":%" PRIu64 ",\"conserved\":%s,"
	       "\"min_rank_ops\":%" PRIu64 ",\"max_rank_ops\":%" PRIu64 "}\n",
	       s->o.label, s->nprocs, all[0], ops, (double)ops / all[0], all[1],
	       all[2], s->nprocs, s->o.single ? "single-lock" : "two-lock",
	       s->o.accounts, s->o.single ? 1 : (uint64_t)s->nwin * (uint64_t)s->nprocs,
	       initial, final, expected,
	       initial == expected && final == expected ? "true" : "false",
	       lo, hi);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct state s;
	double secs = 0;
	s.o = (struct opts){ .accounts = 1024, .balance = 1000000,
			     .max_amount = 100, .seed = 1, .windows = 16,
			     .duration = 5, .label = "mpi" };
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
	MPI_Comm_size(MPI_COMM_WORLD, &s.nprocs);
	if (parse(&s.o, argc, argv) || windows_create(&s) ||
	    !(s.lat = malloc(LAT_CAP * sizeof(*s.lat)))) {
		if (!s.rank)
			fprintf(stderr, "usage: loco-mpi-transfer [--accounts N] "
				"[--windows W (1..%d)] [--duration S] [--balance B]\n"
				"  [--max-amount A] [--single-lock] [--seed S] "
				"[--label TRANSPORT]\n", MAX_WINDOWS);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	s.rng = (s.o.seed + 1) * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)s.rank;
	accounts_fill(&s);
	uint64_t initial = accounts_total(&s);
	run(&s, &secs);
	qsort(s.lat, s.nlat, sizeof(*s.lat), cmp_u64);
	uint64_t final = accounts_total(&s);
	report(&s, secs, initial, final);
	int ok = initial == final;
	MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
	for (unsigned w = 0; w < s.nwin; w++)
		MPI_Win_free(&s.win[w]);
	free(s.lat);
	MPI_Finalize();
	return ok ? 0 : 1;
}

/* SPDX-License-Identifier: MIT */
/* Thread placement (--cpu-bind): the spreading of threads over cores as
 * pure functions, and on a one-node cluster the bindings themselves, seen
 * through pthread_getaffinity_np and compared with hwloc's cores.
 *
 * `test_affinity spread` runs only the check that two threads get two
 * different cores, and exits 77 (skipped) where the process may use fewer
 * than two. */
#include <check.h>
#include <hwloc.h>
#include <hwloc/glibc-sched.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

#include "loco/affinity.h"
#include <loco/loco.h>
#include "test/common/cluster1.h"
#include "test/common/skip.h"

/* ---- pure functions ----------------------------------------------------- */

START_TEST(core_index_examples)
{
	/* Alone on its machine: thread k on core k, wrapping around. */
	for (unsigned k = 0; k < 10; k++)
		ck_assert_uint_eq(loco_core_index(0, 1, k, 4), k % 4);
	/* Two nodes on 4 cores: node 0 takes 0,2,0,2..., node 1 1,3,1,3... */
	ck_assert_uint_eq(loco_core_index(0, 2, 0, 4), 0);
	ck_assert_uint_eq(loco_core_index(0, 2, 1, 4), 2);
	ck_assert_uint_eq(loco_core_index(0, 2, 2, 4), 0);
	ck_assert_uint_eq(loco_core_index(1, 2, 0, 4), 1);
	ck_assert_uint_eq(loco_core_index(1, 2, 1, 4), 3);
	ck_assert_uint_eq(loco_core_index(1, 2, 2, 4), 1);
	/* Three nodes on 2 cores. */
	ck_assert_uint_eq(loco_core_index(2, 3, 0, 2), 0);
	ck_assert_uint_eq(loco_core_index(2, 3, 1, 2), 1);
	ck_assert_uint_eq(loco_core_index(1, 3, 1, 2), 0);
	/* One core: everything on it. */
	ck_assert_uint_eq(loco_core_index(5, 9, 77, 1), 0);
}
END_TEST

/* (r + k*n) mod ncores without overflow, against 128-bit arithmetic. */
START_TEST(core_index_no_overflow)
{
	static const uint64_t ks[] = { 0, 1, 63, UINT32_MAX, (uint64_t)1 << 40,
				       UINT64_MAX / 3, UINT64_MAX - 1, UINT64_MAX };
	static const unsigned ncs[] = { 1, 2, 3, 7, 64, 1000, UINT32_MAX };

	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
		for (size_t j = 0; j < sizeof(ncs) / sizeof(ncs[0]); j++)
			for (unsigned n = 1; n <= 65; n += 16)
				for (unsigned r = 0; r < n; r += 5) {
					unsigned __int128 want = ((unsigned __int128)ks[i] * n + r) % ncs[j];
					ck_assert_uint_eq(loco_core_index(r, n, ks[i], ncs[j]),
							  (unsigned)want);
				}
}
END_TEST

START_TEST(host_rank)
{
	static const char text[] =
		"0 10.0.0.1:7000 memory\n"
		"1 10.0.0.2:7000\n"
		"2 10.0.0.1:7001\n"
		"4 10.0.0.1:7002 compute\n"
		"5 hostb:7000\n"
		"6 10.0.0.10:7000\n";
	static const struct { uint32_t id; unsigned rank, count; } want[] = {
		{ 0, 0, 3 }, { 1, 0, 1 }, { 2, 1, 3 }, { 4, 2, 3 }, { 5, 0, 1 },
		{ 6, 0, 1 },
	};
	struct loco_hosts h;
	char err[256];

	ck_assert_int_eq(loco_hosts_parse("h", text, &h, err, sizeof(err)), 0);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		unsigned rank = 99, count = 99;

		loco_host_rank(&h, want[i].id, &rank, &count);
		ck_assert_uint_eq(rank, want[i].rank);
		ck_assert_uint_eq(count, want[i].count);
	}
}
END_TEST

/* ---- bindings ------------------------------------------------------------ */

static struct cluster1 cl;
static cpu_set_t start_mask;  /* the process's CPUs before any binding */

static void start(const char *cpu_bind)
{
	if (cpu_bind)
		setenv("LOCO_CPU_BIND", cpu_bind, 1);
	else
		unsetenv("LOCO_CPU_BIND");
	ck_assert_int_eq(sched_getaffinity(0, sizeof(start_mask), &start_mask), 0);
	ck_assert_int_eq(cluster1_start(&cl, "", 2000), 0);
}

static void stop(void)
{
	cluster1_stop(&cl);
	unsetenv("LOCO_CPU_BIND");
}

/* What one OS thread saw around creating its loco thread. */
struct seen {
	cpu_set_t before, after;
	int cpu;
	int rc;
};

static void *make_thread(void *arg)
{
	struct seen *s = arg;
	struct loco_thread *thr;

	pthread_getaffinity_np(pthread_self(), sizeof(s->before), &s->before);
	s->rc = loco_thread_create(cl.mgr, &thr);
	if (s->rc)
		return NULL;
	pthread_getaffinity_np(pthread_self(), sizeof(s->after), &s->after);
	s->cpu = loco_thread_cpu(thr);
	loco_thread_destroy(thr);
	return NULL;
}

/* Two OS threads, one after the other, each creating a loco thread. */
static void make_two(struct seen s[2])
{
	for (int i = 0; i < 2; i++) {
		pthread_t t;

		memset(&s[i], 0, sizeof(s[i]));
		ck_assert_int_eq(pthread_create(&t, NULL, make_thread, &s[i]), 0);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		ck_assert_int_eq(s[i].rc, 0);
	}
}

/* Also called outside a test (main): no ck_assert here. */
static hwloc_topology_t topo_load(void)
{
	hwloc_topology_t topo;

	if (hwloc_topology_init(&topo) || hwloc_topology_load(topo)) {
		perror("hwloc topology");
		abort();
	}
	return topo;
}

static hwloc_obj_type_t core_type(hwloc_topology_t topo)
{
	return hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ?
	       HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

/* How many cores have CPUs in MASK. */
static unsigned cores_in(const cpu_set_t *mask)
{
	hwloc_topology_t topo = topo_load();
	hwloc_obj_type_t type = core_type(topo);
	hwloc_cpuset_t m = hwloc_bitmap_alloc();
	unsigned n = 0;

	hwloc_cpuset_from_glibc_sched_affinity(topo, m, mask, sizeof(*mask));
	for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, type); i++)
		n += hwloc_bitmap_intersects(hwloc_get_obj_by_type(topo, type, (unsigned)i)->cpuset, m);
	hwloc_bitmap_free(m);
	hwloc_topology_destroy(topo);
	return n;
}

/* True if MASK is exactly the CPUs of one core that ALLOWED has. */
static bool one_core(const cpu_set_t *mask, const cpu_set_t *allowed)
{
	hwloc_topology_t topo = topo_load();
	hwloc_obj_type_t type = core_type(topo);
	hwloc_cpuset_t m = hwloc_bitmap_alloc();
	hwloc_cpuset_t a = hwloc_bitmap_alloc();
	hwloc_cpuset_t c = hwloc_bitmap_alloc();
	bool found = false;

	hwloc_cpuset_from_glibc_sched_affinity(topo, m, mask, sizeof(*mask));
	hwloc_cpuset_from_glibc_sched_affinity(topo, a, allowed, sizeof(*allowed));
	for (int i = 0; i < hwloc_get_nbobjs_by_type(topo, type) && !found; i++) {
		hwloc_bitmap_and(c, hwloc_get_obj_by_type(topo, type, (unsigned)i)->cpuset, a);
		found = !hwloc_bitmap_iszero(c) && hwloc_bitmap_isequal(c, m);
	}
	hwloc_bitmap_free(m);
	hwloc_bitmap_free(a);
	hwloc_bitmap_free(c);
	hwloc_topology_destroy(topo);
	return found;
}

static int first_cpu(const cpu_set_t *mask)
{
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, mask))
			return i;
	return -1;
}

START_TEST(bind_core)
{
	struct seen s[2];

	start("core");
	make_two(s);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(one_core(&s[i].after, &start_mask),
			      "thread %d: its CPUs are not one core's", i);
		ck_assert_int_eq(s[i].cpu, first_cpu(&s[i].after));
	}
	stop();
}
END_TEST

/* With none, neither the binding changes nor loco_thread_cpu tells one. */
START_TEST(bind_none_untouched)
{
	struct seen s[2];

	start(NULL);
	make_two(s);
	for (int i = 0; i < 2; i++) {
		ck_assert(CPU_EQUAL(&s[i].before, &s[i].after));
		ck_assert(CPU_EQUAL(&s[i].after, &start_mask));
		ck_assert_int_eq(s[i].cpu, -1);
	}
	stop();
}
END_TEST

/* The node's first two threads get two different cores (needs two). */
START_TEST(bind_core_spread)
{
	struct seen s[2];

	start("core");
	make_two(s);
	ck_assert(one_core(&s[0].after, &start_mask));
	ck_assert(one_core(&s[1].after, &start_mask));
	ck_assert_int_ne(s[0].cpu, s[1].cpu);
	ck_assert(!CPU_EQUAL(&s[0].after, &s[1].after));
	stop();
}
END_TEST

static int run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

static Suite *spread_suite(void)
{
	Suite *s = suite_create("affinity spread");
	TCase *tc = tcase_create("spread");

	tcase_add_test(tc, bind_core_spread);
	suite_add_tcase(s, tc);
	return s;
}

static Suite *affinity_suite(void)
{
	Suite *s = suite_create("affinity");
	TCase *tc = tcase_create("pure");

	tcase_add_test(tc, core_index_examples);
	tcase_add_test(tc, core_index_no_overflow);
	tcase_add_test(tc, host_rank);
	suite_add_tcase(s, tc);
	tc = tcase_create("bind");
	tcase_add_test(tc, bind_core);
	tcase_add_test(tc, bind_none_untouched);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	int skip = test_transport_skip();

	if (skip)
		return skip;
	if (argc > 1 && strcmp(argv[1], "spread") == 0) {
		cpu_set_t mask;

		if (sched_getaffinity(0, sizeof(mask), &mask) == 0 &&
		    cores_in(&mask) < 2) {
			return test_skip_hardware("this process may use fewer "
						  "than two cores");
		}
		return run(spread_suite());
	}
	return run(affinity_suite());
}

/* SPDX-License-Identifier: MIT */
/* LOCO_SHM_POPULATE (shm and shm-weak): with 1 every page of a node's
 * arena is backed when the node starts, as an RDMA registration pins its
 * pages; unset, pages are backed as they are first touched; any other
 * value is refused by name; and a /dev/shm too small for a populated
 * arena is an error at start (-ENOMEM, the arena named), not a SIGBUS at
 * the first store past the end of the space. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/common/capture.h"
#include "test/common/cluster.h"

#define ARENA (16u << 20)   /* cluster.h's arena size */

/* Bytes backed in RUN_DIR's arena files (those of ARENA bytes). */
static uint64_t arena_backed(const char *run_dir)
{
	DIR *d = opendir(run_dir);
	ck_assert_ptr_nonnull(d);
	uint64_t backed = 0;
	unsigned files = 0;
	for (struct dirent *e; (e = readdir(d));) {
		char path[512];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", run_dir, e->d_name);
		if (lstat(path, &st) || !S_ISREG(st.st_mode) ||
		    (uint64_t)st.st_size != ARENA)
			continue;
		backed += (uint64_t)st.st_blocks * 512;
		files++;
	}
	closedir(d);
	ck_assert_uint_eq(files, 1);
	return backed;
}

/* Start a one-node cluster with stderr captured into LOG and stop it
 * again: the start's result. */
static int start_captured(char *log, size_t len)
{
	struct cluster cl;
	struct capture cap;
	capture_start(&cap);
	int rc = cluster_start(&cl, 1, 0, 2000);
	capture_end(&cap, log, len);
	cluster_stop(&cl);
	return rc;
}

START_TEST(populated_at_start)
{
	struct cluster cl;
	setenv("LOCO_SHM_POPULATE", "1", 1);
	ck_assert_int_eq(cluster_start(&cl, 1, 0, 2000), 0);
	ck_assert_uint_ge(arena_backed(cl.run_dir), ARENA);
	cluster_stop(&cl);
}
END_TEST

START_TEST(lazy_without_it)
{
	struct cluster cl;
	unsetenv("LOCO_SHM_POPULATE");
	ck_assert_int_eq(cluster_start(&cl, 1, 0, 2000), 0);
	ck_assert_uint_lt(arena_backed(cl.run_dir), ARENA / 2);
	cluster_stop(&cl);
}
END_TEST

START_TEST(bad_value_refused)
{
	char log[4096];
	setenv("LOCO_SHM_POPULATE", "yes", 1);
	int rc = start_captured(log, sizeof(log));
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_msg(strstr(log, "LOCO_SHM_POPULATE: expected 0 or 1, got 'yes'"),
		      "log: %s", log);
}
END_TEST

/* A 4 MiB tmpfs as the run directory, in a mount namespace of this test's
 * own process (check forks each test), so nothing outlives it. */
START_TEST(small_shm_refused_at_start)
{
	if (geteuid() != 0 || unshare(CLONE_NEWNS) ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) {
		fprintf(stderr, "SKIP(root: small_shm_refused_at_start "
			"needs root and mount namespaces; the rest ran)\n");
		return;
	}
	char dir[64];
	rundir_name(dir, sizeof(dir), "chan");
	ck_assert_int_eq(mkdir(dir, 0700) && errno != EEXIST, 0);
	ck_assert_int_eq(mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700"), 0);
	char log[4096];
	setenv("LOCO_SHM_POPULATE", "1", 1);
	int rc = start_captured(log, sizeof(log));
	umount(dir);
	rmdir(dir);
	ck_assert_int_eq(rc, -ENOMEM);
	ck_assert_msg(strstr(log, "cannot populate the 16 MiB arena"), "log: %s",
		      log);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shm_populate");
	TCase *t = tcase_create("populate");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, populated_at_start);
	tcase_add_test(t, lazy_without_it);
	tcase_add_test(t, bad_value_refused);
	tcase_add_test(t, small_shm_refused_at_start);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

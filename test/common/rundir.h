/* SPDX-License-Identifier: MIT */
/* Removal of a test's private shm run directory when the test process
 * exits, also after a failed assertion (Check ends a failing test's
 * process without its teardown). Only the directory this process named
 * after its own pid is touched. */
#ifndef LOCO_TEST_RUNDIR_H
#define LOCO_TEST_RUNDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "apps/common/rundir.h"

static char rundir_path[64];
static pid_t rundir_owner;

/* Only in the process that named the directory: a child forked after
 * (a test's writer, Check's forked test) inherits the handler, and its
 * exit must not remove the directory under the process still using it
 * (whose next fence would then make it anew, holding only fence files,
 * and leave it behind). */
static inline void rundir_remove(void)
{
	if (rundir_path[0] && getpid() == rundir_owner)
		rundir_remove_dir(rundir_path);
}

/* Remember DIR and remove it at exit (registered once per process). */
static inline void rundir_at_exit(const char *dir)
{
	snprintf(rundir_path, sizeof(rundir_path), "%s", dir);
	if (rundir_owner != getpid()) {
		rundir_owner = getpid();
		atexit(rundir_remove);
	}
}

#endif

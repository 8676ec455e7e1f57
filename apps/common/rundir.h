/* SPDX-License-Identifier: MIT */
/* Removal of a private run directory (the shm transport's arena files of
 * one node live in it), for programs run alone (local.c) and for tests
 * (test/common/rundir.h). */
#ifndef LOCO_APPS_RUNDIR_H
#define LOCO_APPS_RUNDIR_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Remove DIR and the files in it (it holds no subdirectories). */
static inline void rundir_remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char f[512];
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(f, sizeof(f), "%s/%s", dir, e->d_name);
			unlink(f);
		}
	closedir(d);
	rmdir(dir);
}

#endif

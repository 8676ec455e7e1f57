/* SPDX-License-Identifier: MIT */
/* Removal of a private run directory (the shm transport's arena files of
 * one node live in it), for programs run alone (local.c) and for tests
 * (test/common/rundir.h). */
#ifndef LOCO_APPS_RUNDIR_H
#define LOCO_APPS_RUNDIR_H

#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Remove DIR and the files in it (it holds no subdirectories). System
 * calls only (no allocation, no stdio): a signal handler may call it. */
static inline void rundir_remove_dir(const char *dir)
{
	char buf[1024];
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	long n;
	while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
		for (long at = 0; at < n;) {
			/* struct linux_dirent64: ino, off, reclen, type, name */
			unsigned short reclen;
			memcpy(&reclen, buf + at + 16, sizeof(reclen));
			const char *name = buf + at + 19;
			if (strcmp(name, ".") && strcmp(name, ".."))
				unlinkat(fd, name, 0);
			at += reclen;
		}
	close(fd);
	rmdir(dir);
}

#endif

/* SPDX-License-Identifier: MIT */
/* A cluster key for an in-process test cluster: 32 random bytes in a fresh
 * file of mode 0600 (mkstemp's), as tools/loco-run makes for its clusters. */
#ifndef LOCO_TEST_KEY_H
#define LOCO_TEST_KEY_H

#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

/* Writes the key to a new file named from TEMPLATE (ends in XXXXXX,
 * rewritten in place): 0, or -1 with nothing left behind. */
static inline int test_key_make(char *template)
{
	unsigned char k[32];
	int fd = mkstemp(template);
	if (fd < 0)
		return -1;
	if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k) ||
	    write(fd, k, sizeof(k)) != (ssize_t)sizeof(k)) {
		close(fd);
		unlink(template);
		return -1;
	}
	close(fd);
	return 0;
}

#endif

/* SPDX-License-Identifier: MIT */
/* Capturing this process's stderr (the library's log) around a step of a
 * test, and counting what it said. */
#ifndef LOCO_TEST_CAPTURE_H
#define LOCO_TEST_CAPTURE_H

#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct capture {
	FILE *f;
	int saved;
};

/* From here on stderr goes to a temporary file. */
static inline void capture_start(struct capture *c)
{
	c->f = tmpfile();
	ck_assert_ptr_nonnull(c->f);
	fflush(stderr);
	c->saved = dup(STDERR_FILENO);
	dup2(fileno(c->f), STDERR_FILENO);
}

/* Back to the real stderr; BUF (LEN bytes) gets what was written. */
static inline void capture_end(struct capture *c, char *buf, size_t len)
{
	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	rewind(c->f);
	size_t n = fread(buf, 1, len - 1, c->f);
	buf[n] = '\0';
	fclose(c->f);
}

/* How often WHAT occurs in S. */
static inline unsigned count_substr(const char *s, const char *what)
{
	unsigned n = 0;
	for (const char *p = s; (p = strstr(p, what)); p++)
		n++;
	return n;
}

#endif

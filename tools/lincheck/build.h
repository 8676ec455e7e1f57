/* SPDX-License-Identifier: MIT */
/* Internal: turning parsed events into a history (readers -> history.c). */
#ifndef LOCO_TOOLS_LINCHECK_BUILD_H
#define LOCO_TOOLS_LINCHECK_BUILD_H

#include "lincheck.h"

enum lc_end {
	LC_END_OPEN,	/* no return event: result unknown, open to the end */
	LC_END_RET,	/* returned with a result */
	LC_END_INFO,	/* returned without a known outcome: like OPEN */
	LC_END_FAIL,	/* returned, definitely without effect: dropped */
};

/* One op as read, before the model has looked at it. */
struct lc_raw {
	uint32_t proc;
	bool has_inv;
	uint8_t end;		/* enum lc_end */
	uint64_t id;
	const struct lc_str *name;
	struct lc_val key;
	struct lc_val args;	/* LC_LIST */
	struct lc_val res;	/* LC_LIST */
	int64_t inv;
	int64_t ret;
	uint32_t inv_line;
	uint32_t ret_line;
};

/* Exact-match table of (a, b, c) -> index, for processes and op ids. */
struct lc_idx_slot;

struct lc_idx {
	struct lc_idx_slot *slots;
	size_t cap;
	size_t n;
};

struct lc_build {
	struct lc_history *h;
	struct lc_diag *d;
	struct lc_raw *raw;
	size_t nraw;
	size_t cap;
	struct lc_idx procs;
	size_t procs_cap;
	struct lc_idx ids;
};

void lc_build_init(struct lc_build *b, struct lc_history *h,
		   struct lc_diag *d);
void lc_build_fini(struct lc_build *b);
/* file:line: reason; returns -EINVAL for the caller to pass on */
int lc_build_err(struct lc_build *b, unsigned line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int lc_build_nomem(struct lc_build *b);
/* Index of the process (a, b), created with name if new. */
int lc_build_proc(struct lc_build *b, uint64_t x, uint64_t y,
		  const char *name, uint32_t *out);
/* The raw op (proc, id), created if new; *fresh tells which. */
int lc_build_raw(struct lc_build *b, uint32_t proc, uint64_t id,
		 struct lc_raw **out, bool *fresh);
int lc_build_push(struct lc_build *b, struct lc_raw **out);
/* Validates every raw op against the model and fills b->h. */
int lc_build_finish(struct lc_build *b);

int lc_jsonl_parse(struct lc_build *b, const char *buf, size_t len);
int lc_jepsen_parse(struct lc_build *b, const char *buf, size_t len);

#endif

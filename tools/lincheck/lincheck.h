/* SPDX-License-Identifier: MIT */
/*
 * loco-lincheck: a linearizability checker for recorded histories.
 *
 * The checker is a standalone tool (libc + libm only). A history is read
 * into a struct lc_history (JSONL from the loco recorder, or Jepsen logs and
 * EDN lines), then checked against a sequential model with the Wing-Gong
 * search, Lowe's memoisation of (linearized set, state) pairs and
 * P-compositionality (independent check per key). See docs/formats.md.
 */
#ifndef LOCO_TOOLS_LINCHECK_H
#define LOCO_TOOLS_LINCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Bump allocator; everything of a history or a search lives in one. */
struct lc_chunk;

struct lc_arena {
	struct lc_chunk *cur;
	struct lc_chunk *spare;
	size_t bytes;	/* held from malloc */
};

struct lc_arena_mark {
	struct lc_chunk *chunk;
	size_t used;
};

void lc_arena_init(struct lc_arena *a);
void lc_arena_fini(struct lc_arena *a);
/* 16-byte aligned memory, or NULL when out of memory. */
void *lc_arena_alloc(struct lc_arena *a, size_t size);
struct lc_arena_mark lc_arena_mark_get(const struct lc_arena *a);
/* Frees everything allocated after the mark. */
void lc_arena_release(struct lc_arena *a, struct lc_arena_mark m);

/* Values of op keys, arguments and results. */
enum lc_kind {
	LC_NULL,
	LC_BOOL,
	LC_INT,
	LC_STR,
	LC_LIST,
	LC_EMPTY,	/* the "empty" marker of a dequeue on an empty queue */
};

struct lc_str {
	uint64_t hash;
	uint32_t len;
	char data[];	/* NUL-terminated */
};

struct lc_val {
	uint8_t kind;
	uint32_t n;	/* LC_LIST: number of items; LC_INT: 1 if > INT64_MAX */
	union {
		bool b;
		int64_t i;
		const struct lc_str *s;
		const struct lc_val *items;
	};
};

extern const struct lc_val lc_val_null;

uint64_t lc_hash_mix(uint64_t x);
uint64_t lc_hash_bytes(const void *p, size_t len);
const struct lc_str *lc_str_new(struct lc_arena *a, const char *p, size_t len);
/* a followed by b, in a new string */
const struct lc_str *lc_str_cat(struct lc_arena *a, const struct lc_str *x,
				const struct lc_str *y);
bool lc_str_equal(const struct lc_str *x, const struct lc_str *y);
bool lc_val_equal(const struct lc_val *x, const struct lc_val *y);
uint64_t lc_val_hash(const struct lc_val *v);
/* Total order: null < bool < int (as u64) < string < list < empty. */
int lc_val_cmp(const struct lc_val *x, const struct lc_val *y);
bool lc_val_is_str(const struct lc_val *v, const char *s);
/*
 * JSON-like text (integers, "strings", [lists], null, true, "empty").
 * Integers are 64-bit two's complement: 2^64-1 and -1 are the same value,
 * printed the way it was written.
 */
void lc_val_print(const struct lc_val *v, FILE *f);

/* Operations. */
#define LC_T_INF INT64_MAX
#define LC_MAX_ARGS 2

enum lc_res_kind {
	LC_RES_NONE,	/* res [] */
	LC_RES_BOOL,	/* res [true|false] ("fail" reads as false) */
	LC_RES_VAL,	/* res [v] */
};

struct lc_opdesc {
	const char *name;
	uint8_t nargs;
	uint8_t res;	/* enum lc_res_kind */
};

struct lc_op {
	int64_t inv;		/* invocation time */
	int64_t ret;		/* return time, LC_T_INF if never returned */
	uint32_t proc;		/* index into lc_history.procs */
	uint32_t inv_line;
	uint32_t ret_line;	/* 0 when there was no return event */
	uint16_t code;		/* index into the model's op table */
	bool unknown;		/* the result is unknown and not checked */
	uint8_t nargs;
	struct lc_val key;	/* LC_NULL when the op has no key */
	struct lc_val args[LC_MAX_ARGS];
	struct lc_val res;	/* meaningless for LC_RES_NONE or unknown ops */
};

/* Sequential specifications. */
struct lc_model {
	const char *name;
	const char *summary;
	const struct lc_opdesc *ops;
	unsigned nops;
	bool partition;	/* P-compositional: ops on different keys commute */
	/*
	 * Type-checks key and args (res false) or the result (res true) of
	 * one op, normalising markers; NULL or a reason.
	 */
	const char *(*validate)(struct lc_op *op, bool res);
	int (*init)(struct lc_arena *a, const void **st);
	/* 1 and *next if op is legal in st, 0 if not, -ENOMEM. */
	int (*step)(struct lc_arena *a, const void *st, const struct lc_op *op,
		    const void **next);
	uint64_t (*hash)(const void *st);
	bool (*equal)(const void *x, const void *y);
	void (*describe)(const void *st, FILE *f);
};

extern const struct lc_model lc_model_register;
extern const struct lc_model lc_model_cas_register;
extern const struct lc_model lc_model_counter;
extern const struct lc_model lc_model_mutex;
extern const struct lc_model lc_model_queue;
extern const struct lc_model lc_model_map;
extern const struct lc_model lc_model_append_map;
extern const struct lc_model lc_model_ordered_map;

/* NULL-terminated list of all models. */
extern const struct lc_model *const lc_models[];
const struct lc_model *lc_model_find(const char *name);
const struct lc_opdesc *lc_model_op(const struct lc_model *m, const char *name,
				    uint16_t *code);

/* Histories. */
enum lc_format {
	LC_FMT_AUTO,
	LC_FMT_JSONL,
	LC_FMT_JEPSEN,	/* jepsen.util log lines and EDN op maps */
};

struct lc_history {
	const char *name;
	const struct lc_model *model;
	struct lc_arena arena;
	struct lc_op *ops;
	size_t nops;
	const char **procs;	/* display names of processes */
	size_t nprocs;
	bool jsonl;		/* times are ns, ties are concurrent */
};

/* Where and why input was rejected; line 0 for whole-file errors. */
struct lc_diag {
	unsigned line;
	char msg[200];
};

int lc_format_parse(const char *s, enum lc_format *out);
int lc_history_parse(const char *name, const char *buf, size_t len,
		     enum lc_format fmt, const struct lc_model *m,
		     struct lc_history *h, struct lc_diag *d);
int lc_history_read(const char *path, enum lc_format fmt,
		    const struct lc_model *m, struct lc_history *h,
		    struct lc_diag *d);
void lc_history_fini(struct lc_history *h);
void lc_op_print_call(const struct lc_history *h, const struct lc_op *op,
		      FILE *f);
void lc_op_print(const struct lc_history *h, const struct lc_op *op, FILE *f);

/* Checking. */
enum lc_verdict {
	LC_LINEARIZABLE,
	LC_NOT_LINEARIZABLE,
	LC_UNKNOWN,	/* a limit was reached first */
};

enum lc_limit {
	LC_LIMIT_NONE,
	LC_LIMIT_TIME,
	LC_LIMIT_MEMORY,
};

struct lc_check_opts {
	int64_t deadline_ns;	/* CLOCK_MONOTONIC; 0 = no limit */
	size_t max_bytes;	/* memory of the searches; 0 = no limit */
};

/*
 * For a history that is not linearizable: the partition (ops sharing the
 * failing key, or all ops), the longest linearizable prefix the search
 * found in it, the state after that prefix and the op that could not be
 * linearized after it (the earliest-returning op left out). Op numbers are
 * indices into lc_history.ops.
 */
struct lc_result {
	enum lc_verdict verdict;
	enum lc_limit limit;	/* why the verdict is LC_UNKNOWN */
	size_t *part;
	size_t npart;
	size_t *prefix;
	size_t nprefix;
	size_t fail_op;
	char *state;	/* model's description of the state after prefix */
};

int lc_check(const struct lc_history *h, const struct lc_check_opts *o,
	     struct lc_result *r);
void lc_result_fini(struct lc_result *r);

int lc_html_write(FILE *f, const struct lc_history *h,
		  const struct lc_result *r);
int lc_html_begin(FILE *f);
int lc_html_end(FILE *f);

int64_t lc_now_ns(void);

#endif

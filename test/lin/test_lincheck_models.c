/* SPDX-License-Identifier: MIT */
/*
 * loco-lincheck library tests: hand-written histories for every model with
 * both verdicts, the input formats and their errors, and random small
 * histories checked against a brute-force search over all orders.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools/lincheck/lincheck.h"

/* A completed op of process p: invoked at time t0, returned at t1. */
#define OP(p, id, t0, t1, op, args, res)                                      \
	"{\"t\":" #t0 ",\"ev\":\"inv\",\"pid\":" #p ",\"id\":" #id              \
	",\"op\":\"" op "\",\"args\":" args "}\n"                               \
	"{\"t\":" #t1 ",\"ev\":\"ret\",\"pid\":" #p ",\"id\":" #id              \
	",\"res\":" res "}\n"
#define OPK(p, id, t0, t1, op, key, args, res)                                \
	"{\"t\":" #t0 ",\"ev\":\"inv\",\"pid\":" #p ",\"id\":" #id              \
	",\"op\":\"" op "\",\"key\":" key ",\"args\":" args "}\n"               \
	"{\"t\":" #t1 ",\"ev\":\"ret\",\"pid\":" #p ",\"id\":" #id              \
	",\"res\":" res "}\n"
/* An op that never returned. */
#define OPEN(p, id, t0, op, args)                                             \
	"{\"t\":" #t0 ",\"ev\":\"inv\",\"pid\":" #p ",\"id\":" #id              \
	",\"op\":\"" op "\",\"args\":" args "}\n"

static int parse(const char *model, const char *text, enum lc_format fmt,
		 struct lc_history *h, struct lc_diag *d)
{
	const struct lc_model *m = lc_model_find(model);

	ck_assert_ptr_nonnull(m);
	return lc_history_parse("test", text, strlen(text), fmt, m, h, d);
}

static enum lc_verdict verdict_fmt(const char *model, const char *text,
				   enum lc_format fmt)
{
	struct lc_check_opts o = { 0 };
	struct lc_history h;
	struct lc_result r;
	struct lc_diag d;
	int ret;

	ret = parse(model, text, fmt, &h, &d);
	ck_assert_msg(!ret, "parse failed: %u: %s", d.line, d.msg);
	ck_assert_int_eq(lc_check(&h, &o, &r), 0);
	lc_result_fini(&r);
	lc_history_fini(&h);
	return r.verdict;
}

static enum lc_verdict verdict(const char *model, const char *text)
{
	return verdict_fmt(model, text, LC_FMT_AUTO);
}

static void expect_error(const char *model, const char *text, unsigned line,
			 const char *what)
{
	struct lc_history h;
	struct lc_diag d;

	ck_assert_int_eq(parse(model, text, LC_FMT_AUTO, &h, &d), -EINVAL);
	ck_assert_uint_eq(d.line, line);
	ck_assert_msg(strstr(d.msg, what), "message '%s' lacks '%s'", d.msg, what);
}

#define LIN LC_LINEARIZABLE
#define NOT LC_NOT_LINEARIZABLE

START_TEST(test_register)
{
	ck_assert_int_eq(verdict("register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OP(0, 2, 3, 4, "read", "[]", "[1]")), LIN);
	/* a read after a completed write sees it */
	ck_assert_int_eq(verdict("register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OP(1, 1, 3, 4, "read", "[]", "[null]")), NOT);
	/* overlapping: either value */
	ck_assert_int_eq(verdict("register",
		OP(0, 1, 1, 4, "write", "[1]", "[]")
		OP(1, 1, 2, 3, "read", "[]", "[null]")), LIN);
	ck_assert_int_eq(verdict("register",
		OP(0, 1, 1, 4, "write", "[\"a\"]", "[]")
		OP(1, 1, 2, 3, "read", "[]", "[\"a\"]")), LIN);
	ck_assert_int_eq(verdict("register",
		OP(0, 1, 1, 4, "write", "[1]", "[]")
		OP(1, 1, 2, 3, "read", "[]", "[2]")), NOT);
	/* a write that never returned may have taken effect, at any time */
	ck_assert_int_eq(verdict("register",
		OPEN(0, 1, 1, "write", "[2]")
		OP(1, 1, 5, 6, "read", "[]", "[null]")
		OP(1, 2, 7, 8, "read", "[]", "[2]")), LIN);
	ck_assert_int_eq(verdict("register",
		OPEN(0, 1, 1, "write", "[2]")
		OP(1, 1, 5, 6, "read", "[]", "[2]")
		OP(1, 2, 7, 8, "read", "[]", "[null]")), NOT);
	expect_error("register", OP(0, 1, 1, 2, "cas", "[1, 2]", "[true]"), 1,
		     "unknown op 'cas' for model register");
}
END_TEST

START_TEST(test_cas_register)
{
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OP(0, 2, 3, 4, "cas", "[1, 2]", "[true]")
		OP(0, 3, 5, 6, "cas", "[1, 3]", "[false]")
		OP(0, 4, 7, 8, "read", "[]", "[2]")), LIN);
	/* a CAS fails iff the value differs */
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OP(0, 2, 3, 4, "cas", "[1, 2]", "[false]")), NOT);
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 3, 4, "cas", "[null, 2]", "[\"fail\"]")), NOT);
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 3, 4, "cas", "[null, 2]", "[true]")
		OP(0, 2, 5, 6, "read", "[]", "[2]")), LIN);
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OP(0, 2, 3, 4, "cas", "[0, 2]", "[true]")), NOT);
	/* a CAS without outcome: took effect or not */
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OPEN(1, 1, 3, "cas", "[1, 2]")
		OP(0, 2, 5, 6, "read", "[]", "[1]")
		OP(0, 3, 7, 8, "read", "[]", "[2]")), LIN);
	ck_assert_int_eq(verdict("cas-register",
		OP(0, 1, 1, 2, "write", "[1]", "[]")
		OPEN(1, 1, 3, "cas", "[1, 2]")
		OP(0, 3, 7, 8, "read", "[]", "[3]")), NOT);
}
END_TEST

START_TEST(test_counter)
{
	ck_assert_int_eq(verdict("counter",
		OP(0, 1, 1, 4, "faa", "[1]", "[0]")
		OP(1, 1, 2, 5, "faa", "[1]", "[1]")
		OP(0, 2, 6, 7, "read", "[]", "[2]")), LIN);
	ck_assert_int_eq(verdict("counter",
		OP(0, 1, 1, 4, "faa", "[1]", "[0]")
		OP(1, 1, 2, 5, "faa", "[1]", "[0]")), NOT);
	ck_assert_int_eq(verdict("counter",
		OP(0, 1, 1, 2, "faa", "[-1]", "[0]")
		OP(0, 2, 3, 4, "read", "[]", "[-1]")
		OP(0, 3, 5, 6, "cas", "[-1, 5]", "[true]")
		OP(0, 4, 7, 8, "write", "[9]", "[]")
		OP(0, 5, 9, 10, "faa", "[2]", "[9]")
		OP(0, 6, 11, 12, "read", "[]", "[11]")), LIN);
	ck_assert_int_eq(verdict("counter",
		OP(0, 1, 1, 2, "faa", "[5]", "[0]")
		OP(0, 2, 3, 4, "read", "[]", "[0]")), NOT);
	/* a lost increment: two faa that never returned, read sees both */
	ck_assert_int_eq(verdict("counter",
		OPEN(0, 1, 1, "faa", "[1]")
		OPEN(1, 1, 1, "faa", "[1]")
		OP(2, 1, 5, 6, "read", "[]", "[2]")), LIN);
	ck_assert_int_eq(verdict("counter",
		OPEN(0, 1, 1, "faa", "[1]")
		OP(2, 1, 5, 6, "read", "[]", "[2]")), NOT);
	expect_error("counter", OP(0, 1, 1, 2, "read", "[]", "[null]"), 2,
		     "res must be an integer");
	expect_error("counter", OP(0, 1, 1, 2, "write", "[\"x\"]", "[]"), 1,
		     "args must be integers");
}
END_TEST

START_TEST(test_mutex)
{
	ck_assert_int_eq(verdict("mutex",
		OP(0, 1, 1, 2, "lock", "[]", "[]")
		OP(0, 2, 3, 4, "unlock", "[]", "[]")
		OP(1, 1, 5, 6, "lock", "[]", "[]")), LIN);
	ck_assert_int_eq(verdict("mutex",
		OP(0, 1, 1, 2, "lock", "[]", "[]")
		OP(1, 1, 3, 4, "lock", "[]", "[]")), NOT);
	/* the second lock waits for the unlock */
	ck_assert_int_eq(verdict("mutex",
		OP(0, 1, 1, 2, "lock", "[]", "[]")
		OP(1, 1, 3, 10, "lock", "[]", "[]")
		OP(0, 2, 4, 5, "unlock", "[]", "[]")), LIN);
	/* unlock by a process that does not hold the lock */
	ck_assert_int_eq(verdict("mutex",
		OP(0, 1, 1, 2, "lock", "[]", "[]")
		OP(1, 1, 3, 4, "unlock", "[]", "[]")), NOT);
	ck_assert_int_eq(verdict("mutex",
		OP(0, 1, 1, 2, "unlock", "[]", "[]")), NOT);
	ck_assert_int_eq(verdict("mutex",
		OP(0, 1, 1, 2, "trylock", "[]", "[true]")
		OP(1, 1, 3, 4, "trylock", "[]", "[false]")
		OP(0, 2, 5, 6, "unlock", "[]", "[]")), LIN);
	ck_assert_int_eq(verdict("mutex",
		OP(1, 1, 3, 4, "trylock", "[]", "[false]")), NOT);
	/* a lock whose caller died may hold the lock forever */
	ck_assert_int_eq(verdict("mutex",
		OPEN(0, 1, 1, "lock", "[]")
		OP(1, 1, 3, 4, "trylock", "[]", "[false]")), LIN);
}
END_TEST

START_TEST(test_queue)
{
	ck_assert_int_eq(verdict("queue",
		OP(0, 1, 1, 2, "enq", "[1]", "[]")
		OP(0, 2, 3, 4, "enq", "[2]", "[]")
		OP(1, 1, 5, 6, "deq", "[]", "[1]")
		OP(1, 2, 7, 8, "deq", "[]", "[2]")
		OP(1, 3, 9, 10, "deq", "[]", "[\"empty\"]")), LIN);
	ck_assert_int_eq(verdict("queue",
		OP(0, 1, 1, 2, "enq", "[1]", "[]")
		OP(0, 2, 3, 4, "enq", "[2]", "[]")
		OP(1, 1, 5, 6, "deq", "[]", "[2]")), NOT);
	/* concurrent enqueues: either order */
	ck_assert_int_eq(verdict("queue",
		OP(0, 1, 1, 4, "enq", "[1]", "[]")
		OP(1, 1, 2, 5, "enq", "[2]", "[]")
		OP(2, 1, 6, 7, "deq", "[]", "[2]")
		OP(2, 2, 8, 9, "deq", "[]", "[1]")), LIN);
	ck_assert_int_eq(verdict("queue",
		OP(0, 1, 1, 2, "enq", "[\"x\"]", "[]")
		OP(1, 1, 3, 4, "deq", "[]", "[\"empty\"]")), NOT);
	ck_assert_int_eq(verdict("queue",
		OP(1, 1, 3, 4, "deq", "[]", "[7]")), NOT);
	expect_error("queue", OP(0, 1, 1, 2, "enq", "[\"empty\"]", "[]"), 1,
		     "reserved");
}
END_TEST

START_TEST(test_map)
{
	ck_assert_int_eq(verdict("map",
		OPK(0, 1, 1, 2, "insert", "5", "[10]", "[true]")
		OPK(0, 2, 3, 4, "insert", "5", "[11]", "[false]")
		OPK(0, 3, 5, 6, "get", "5", "[]", "[10]")
		OPK(0, 4, 7, 8, "update", "5", "[\"v\"]", "[true]")
		OPK(0, 5, 9, 10, "get", "5", "[]", "[\"v\"]")
		OPK(0, 6, 11, 12, "delete", "5", "[]", "[true]")
		OPK(0, 7, 13, 14, "delete", "5", "[]", "[false]")
		OPK(0, 8, 15, 16, "update", "5", "[1]", "[false]")
		OPK(0, 9, 17, 18, "get", "5", "[]", "[null]")
		OPK(0, 10, 19, 20, "put", "5", "[3]", "[]")
		OPK(0, 11, 21, 22, "get", "5", "[]", "[3]")), LIN);
	ck_assert_int_eq(verdict("map",
		OPK(0, 1, 1, 4, "insert", "5", "[1]", "[true]")
		OPK(1, 1, 2, 3, "insert", "5", "[2]", "[true]")), NOT);
	ck_assert_int_eq(verdict("map",
		OPK(0, 1, 1, 2, "update", "5", "[1]", "[true]")), NOT);
	ck_assert_int_eq(verdict("map",
		OPK(0, 1, 1, 2, "delete", "\"k\"", "[]", "[true]")), NOT);
	/* keys are independent */
	ck_assert_int_eq(verdict("map",
		OPK(0, 1, 1, 4, "put", "1", "[1]", "[]")
		OPK(1, 1, 2, 3, "put", "2", "[2]", "[]")
		OPK(1, 2, 5, 6, "get", "1", "[]", "[1]")
		OPK(0, 2, 7, 8, "get", "2", "[]", "[2]")), LIN);
	expect_error("map", OP(0, 1, 1, 2, "get", "[]", "[null]"), 1,
		     "needs a key");
	expect_error("map", OPK(0, 1, 1, 2, "put", "1", "[null]", "[]"), 1,
		     "value must be");
	expect_error("map", OPK(0, 1, 1, 2, "insert", "1", "[1]", "[]"), 2,
		     "expects res [true|false]");
}
END_TEST

START_TEST(test_map_partition_report)
{
	static const char text[] =
		OPK(0, 1, 1, 2, "put", "1", "[1]", "[]")
		OPK(0, 2, 3, 4, "put", "2", "[5]", "[]")
		OPK(1, 1, 5, 6, "get", "1", "[]", "[1]")
		OPK(1, 2, 7, 8, "get", "2", "[]", "[6]");
	struct lc_check_opts o = { 0 };
	struct lc_history h;
	struct lc_result r;
	struct lc_diag d;

	ck_assert_int_eq(parse("map", text, LC_FMT_JSONL, &h, &d), 0);
	ck_assert_int_eq(lc_check(&h, &o, &r), 0);
	ck_assert_int_eq(r.verdict, NOT);
	ck_assert_uint_eq(r.npart, 2);
	ck_assert_uint_eq(r.nprefix, 1);
	ck_assert_uint_eq(h.ops[r.prefix[0]].inv_line, 3);
	ck_assert_uint_eq(h.ops[r.fail_op].inv_line, 7);
	ck_assert_str_eq(r.state, "{2: 5}");
	lc_result_fini(&r);
	lc_history_fini(&h);
}
END_TEST

START_TEST(test_append_map)
{
	ck_assert_int_eq(verdict("append-map",
		OPK(0, 1, 1, 2, "get", "\"k\"", "[]", "[\"\"]")
		OPK(0, 2, 3, 4, "append", "\"k\"", "[\"a\"]", "[]")
		OPK(1, 1, 5, 8, "append", "\"k\"", "[\"b\"]", "[]")
		OPK(0, 3, 6, 7, "get", "\"k\"", "[]", "[\"a\"]")
		OPK(0, 4, 9, 10, "get", "\"k\"", "[]", "[\"ab\"]")
		OPK(0, 5, 11, 12, "put", "\"k\"", "[\"x\"]", "[]")
		OPK(0, 6, 13, 14, "get", "\"k\"", "[]", "[\"x\"]")
		OPK(0, 7, 15, 16, "get", "\"j\"", "[]", "[null]")), LIN);
	ck_assert_int_eq(verdict("append-map",
		OPK(0, 1, 1, 2, "append", "\"k\"", "[\"a\"]", "[]")
		OPK(0, 2, 3, 4, "append", "\"k\"", "[\"b\"]", "[]")
		OPK(0, 3, 5, 6, "get", "\"k\"", "[]", "[\"ba\"]")), NOT);
	ck_assert_int_eq(verdict("append-map",
		OPK(0, 1, 1, 2, "put", "\"k\"", "[\"a\"]", "[]")
		OPK(0, 2, 3, 4, "get", "\"k\"", "[]", "[\"\"]")), NOT);
	expect_error("append-map", OPK(0, 1, 1, 2, "append", "1", "[1]", "[]"), 1,
		     "value must be a string");
}
END_TEST

START_TEST(test_ordered_map)
{
	static const char base[] =
		OPK(0, 1, 1, 2, "put", "3", "[\"c\"]", "[]")
		OPK(0, 2, 3, 4, "put", "1", "[\"a\"]", "[]")
		OPK(0, 3, 5, 6, "insert", "2", "[\"b\"]", "[true]");
	char text[2048];

	snprintf(text, sizeof(text), "%s%s", base,
		 OP(1, 1, 7, 8, "scan", "[1, 2]", "[[[1, \"a\"], [2, \"b\"]]]")
		 OP(1, 2, 9, 10, "scan", "[4, 9]", "[[]]"));
	ck_assert_int_eq(verdict("ordered-map", text), LIN);
	snprintf(text, sizeof(text), "%s%s", base,
		 OP(1, 1, 7, 8, "scan", "[1, 3]", "[[[1, \"a\"], [3, \"c\"]]]"));
	ck_assert_int_eq(verdict("ordered-map", text), NOT);
	snprintf(text, sizeof(text), "%s%s", base,
		 OP(1, 1, 7, 8, "scan", "[1, 2]", "[[[2, \"b\"], [1, \"a\"]]]"));
	ck_assert_int_eq(verdict("ordered-map", text), NOT);
	/* a scan sees a concurrent put or not, but not half of two puts */
	ck_assert_int_eq(verdict("ordered-map",
		OPK(0, 1, 1, 6, "put", "2", "[\"x\"]", "[]")
		OP(1, 1, 2, 3, "scan", "[0, 9]", "[[[2, \"x\"]]]")
		OP(1, 2, 4, 5, "scan", "[0, 9]", "[[[2, \"x\"]]]")), LIN);
	ck_assert_int_eq(verdict("ordered-map",
		OPK(0, 1, 1, 6, "put", "2", "[\"x\"]", "[]")
		OPK(2, 1, 1, 6, "put", "3", "[\"y\"]", "[]")
		OP(1, 1, 2, 3, "scan", "[0, 9]", "[[[2, \"x\"]]]")
		OP(1, 2, 4, 5, "scan", "[0, 9]", "[[[3, \"y\"]]]")), NOT);
	expect_error("ordered-map", OPK(0, 1, 1, 2, "scan", "1", "[1, 2]", "[[]]"),
		     1, "scan takes no key");
	expect_error("ordered-map", OP(0, 1, 1, 2, "scan", "[1, 2]", "[[1]]"), 2,
		     "res must be");
}
END_TEST

START_TEST(test_jsonl_events)
{
	/* any line order, unknown fields, tids, info and fail events */
	ck_assert_int_eq(verdict("register",
		"{\"ev\":\"ret\",\"t\":4,\"pid\":0,\"tid\":1,\"id\":9,\"res\":[1]}\n"
		"\n"
		"{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"tid\":0,\"id\":9,\"op\":\"write\","
		"\"args\":[1],\"note\":{\"x\":[1,{\"y\":null}]}}\n"
		"{\"t\":2,\"ev\":\"ret\",\"pid\":0,\"tid\":0,\"id\":9,\"res\":[]}\n"
		"  {\"t\":3,\"ev\":\"inv\",\"pid\":0,\"tid\":1,\"id\":9,\"op\":\"read\"}\n"
		"{\"t\":5,\"ev\":\"inv\",\"pid\":1,\"id\":1,\"op\":\"write\",\"args\":[7]}\n"
		"{\"t\":6,\"ev\":\"fail\",\"pid\":1,\"id\":1}\n"
		"{\"t\":7,\"ev\":\"inv\",\"pid\":1,\"id\":2,\"op\":\"write\",\"args\":[8]}\n"
		"{\"t\":8,\"ev\":\"info\",\"pid\":1,\"id\":2}\n"
		OP(0, 1, 9, 10, "read", "[]", "[8]")), LIN);
	/* the failed write had no effect */
	ck_assert_int_eq(verdict("register",
		"{\"t\":5,\"ev\":\"inv\",\"pid\":1,\"id\":1,\"op\":\"write\",\"args\":[7]}\n"
		"{\"t\":6,\"ev\":\"fail\",\"pid\":1,\"id\":1}\n"
		OP(0, 1, 9, 10, "read", "[]", "[7]")), NOT);
	/* equal times overlap */
	ck_assert_int_eq(verdict("register",
		OP(0, 1, 1, 5, "write", "[1]", "[]")
		OP(1, 1, 5, 6, "read", "[]", "[null]")), LIN);
	/* strings with escapes, big u64 keys */
	ck_assert_int_eq(verdict("map",
		OPK(0, 1, 1, 2, "put", "18446744073709551615", "[\"\\u00e9\\n\\\"\"]", "[]")
		OPK(0, 2, 3, 4, "get", "18446744073709551615", "[]",
		    "[\"\xc3\xa9\\u000a\\\"\"]")), LIN);
	ck_assert_int_eq(verdict("register", ""), LIN);
	ck_assert_int_eq(verdict("register", "\n  \n"), LIN);
}
END_TEST

START_TEST(test_jsonl_errors)
{
	static const char w1[] = OP(0, 1, 1, 2, "write", "[1]", "[]");

	expect_error("register", "{\"t\":1,\"ev\":\"ret\",\"pid\":0,\"id\":1}\n", 1,
		     "without an invocation");
	expect_error("register", "\n{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"\n",
		     2, "expected ','");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}x\n",
		     1, "trailing");
	expect_error("register", "{\"t\":1.5,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n",
		     1, "only integer");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"op\":\"read\"}\n",
		     1, "missing field \"id\"");
	expect_error("register", "{\"t\":-1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n",
		     1, "non-negative");
	expect_error("register", "{\"t\":1,\"ev\":\"go\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n",
		     1, "field \"ev\"");
	expect_error("register", "{\"t\":1,\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n",
		     1, "duplicate field");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"write\",\"args\":[{}]}\n",
		     1, "objects are not supported");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"write\",\"args\":1}\n",
		     1, "must be an array");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\",\"key\":-3}\n",
		     1, "u64 or a string");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"r\\x\"}\n",
		     1, "bad escape");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n"
		     "{\"t\":2,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n",
		     2, "duplicate invocation");
	expect_error("register", "{\"t\":1,\"ev\":\"ret\",\"pid\":0,\"id\":1,\"res\":[]}\n"
		     "{\"t\":2,\"ev\":\"ret\",\"pid\":0,\"id\":1,\"res\":[]}\n",
		     2, "duplicate return");
	expect_error("register", "{\"t\":5,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n"
		     "{\"t\":4,\"ev\":\"ret\",\"pid\":0,\"id\":1,\"res\":[1]}\n",
		     2, "returns before");
	expect_error("register", OP(0, 1, 1, 5, "write", "[1]", "[]")
		     OP(0, 2, 3, 6, "write", "[2]", "[]"), 3, "while its op of line 1");
	expect_error("register", OP(0, 1, 1, 2, "write", "[]", "[]"), 1,
		     "takes 1 args, got 0");
	expect_error("register", OP(0, 1, 1, 2, "write", "[1]", "[1]"), 2,
		     "expects res []");
	expect_error("register", "{\"t\":1,\"ev\":\"inv\",\"pid\":0,\"id\":1,\"op\":\"read\"}\n"
		     "{\"t\":2,\"ev\":\"ret\",\"pid\":0,\"id\":1,\"op\":\"write\",\"res\":[1]}\n",
		     2, "op differs");
	expect_error("register", "hello\n", 1, "cannot tell the history format");
	ck_assert_int_eq(verdict_fmt("register", w1, LC_FMT_JSONL), LIN);
}
END_TEST

START_TEST(test_jepsen_formats)
{
	static const char log_ok[] =
		"INFO  jepsen.util - 0\t:invoke\t:write\t1\n"
		"INFO  jepsen.core - some other logger line\n"
		"INFO  jepsen.util - 0\t:ok\t:write\t1\n"
		"INFO  jepsen.util - :nemesis\t:info\t:start\tnil\n"
		"INFO  jepsen.util - 1 :invoke :cas [1 2]\n"
		"INFO  jepsen.util - 2\t:invoke\t:read\tnil\n"
		"INFO  jepsen.util - 1 :ok :cas [1 2]\n"
		"INFO  jepsen.util - 2\t:fail\t:read\t:timed-out\n"
		"INFO  jepsen.util - 0\t:invoke\t:cas\t[1 3]\n"
		"INFO  jepsen.util - 0\t:fail\t:cas\t[1 3]\n"
		"INFO  jepsen.util - 3\t:invoke\t:write\t4\n"
		"INFO  jepsen.util - 3\t:info\t:write\t:timed-out\n"
		"INFO  jepsen.util - 0\t:invoke\t:read\tnil\n"
		"INFO  jepsen.util - 0\t:ok\t:read\t4\n";
	static const char log_bad[] =
		"INFO  jepsen.util - 0\t:invoke\t:write\t1\n"
		"INFO  jepsen.util - 0\t:ok\t:write\t1\n"
		"INFO  jepsen.util - 1\t:invoke\t:cas\t[1 2]\n"
		"INFO  jepsen.util - 1\t:fail\t:cas\t[1 2]\n";
	static const char edn_ok[] =
		"{:process 0, :type :invoke, :f :append, :key \"k\", :value \"x\"}\n"
		"{:process 1, :type :invoke, :f :get, :key \"k\", :value nil}\n"
		"{:process 0, :type :ok, :f :append, :key \"k\", :value \"x\"}\n"
		"{:process 1, :type :ok, :f :get, :key \"k\", :value \"\"}\n"
		"{:process 1, :type :invoke, :f :get, :key \"k\", :value nil, :time 5}\n"
		"{:process 1, :type :ok, :f :get, :key \"k\", :value \"x\"}\n";
	static const char edn_bad[] =
		"{:process 0, :type :invoke, :f :put, :key \"k\", :value \"x\"}\n"
		"{:process 0, :type :ok, :f :put, :key \"k\", :value \"x\"}\n"
		"{:process 1, :type :invoke, :f :get, :key \"k\", :value nil}\n"
		"{:process 1, :type :ok, :f :get, :key \"k\", :value \"\"}\n";

	ck_assert_int_eq(verdict("cas-register", log_ok), LIN);
	ck_assert_int_eq(verdict("cas-register", log_bad), NOT);
	ck_assert_int_eq(verdict_fmt("cas-register", log_ok, LC_FMT_JEPSEN), LIN);
	ck_assert_int_eq(verdict("append-map", edn_ok), LIN);
	ck_assert_int_eq(verdict("append-map", edn_bad), NOT);
	expect_error("cas-register", "INFO  jepsen.util - 0\t:ok\t:write\t1\n", 1,
		     "without an invocation");
	expect_error("cas-register", "INFO  jepsen.util - 0\t:invoke\t:write\t1\n"
		     "INFO  jepsen.util - 0\t:invoke\t:write\t2\n", 2, "pending");
	expect_error("cas-register", "INFO  jepsen.util - 0\t:invoke\t:write\t1\n"
		     "INFO  jepsen.util - 0\t:ok\t:read\t1\n", 2, "completion :read");
	expect_error("cas-register", "INFO  jepsen.util - 0\t:invoke\t:frob\t1\n"
		     "INFO  jepsen.util - 0\t:ok\t:frob\t1\n", 1, "unknown op 'frob'");
	expect_error("cas-register", "INFO  jepsen.util - 0\t:invoke\t:write\t1.5\n",
		     1, "only integer");
	expect_error("append-map", "{:process 0, :type :invoke, :key \"k\"}\n", 1,
		     ":process, :type and :f");
	expect_error("append-map", "{:process 0, :type :invoke, :f :get, :key \"k\"\n",
		     1, "unterminated map");
}
END_TEST

/* 22 concurrent writes and an impossible read: far more than one slice. */
static void check_limited(const struct lc_check_opts *o, enum lc_limit limit)
{
	char text[8192], *p = text;
	struct lc_history h;
	struct lc_result r;
	struct lc_diag d;
	int i;

	for (i = 0; i < 22; i++)
		p += sprintf(p, "{\"t\":%d,\"ev\":\"inv\",\"pid\":%d,\"id\":1,\"op\":\"write\",\"args\":[%d]}\n"
			     "{\"t\":%d,\"ev\":\"ret\",\"pid\":%d,\"id\":1}\n",
			     i, i, i, 100 + i, i);
	sprintf(p, "%s", OP(99, 1, 200, 201, "read", "[]", "[99]"));
	ck_assert_int_eq(parse("register", text, LC_FMT_JSONL, &h, &d), 0);
	ck_assert_int_eq(lc_check(&h, o, &r), 0);
	ck_assert_int_eq(r.verdict, LC_UNKNOWN);
	ck_assert_int_eq(r.limit, limit);
	lc_result_fini(&r);
	lc_history_fini(&h);
}

START_TEST(test_limits)
{
	struct lc_check_opts late = { .deadline_ns = 1 };
	struct lc_check_opts small = { .max_bytes = 1 };

	check_limited(&late, LC_LIMIT_TIME);
	check_limited(&small, LC_LIMIT_MEMORY);
}
END_TEST

/*
 * Brute force: some op that no other remaining op precedes in real time
 * goes next; ops without a result may also never happen.
 */
static bool bf_search(const struct lc_history *h, struct lc_arena *a,
		      const void *st, uint32_t done)
{
	size_t i, j;

	for (i = 0; i < h->nops && ((done >> i & 1) || h->ops[i].unknown); i++)
		;
	if (i == h->nops)
		return true;
	for (i = 0; i < h->nops; i++) {
		const void *next;
		bool first = !(done >> i & 1);

		for (j = 0; first && j < h->nops; j++)
			if (!(done >> j & 1) && h->ops[j].ret < h->ops[i].inv)
				first = false;
		if (!first || h->model->step(a, st, &h->ops[i], &next) <= 0)
			continue;
		if (bf_search(h, a, next, done | 1u << i))
			return true;
	}
	return false;
}

static enum lc_verdict bf_verdict(const struct lc_history *h)
{
	struct lc_arena a;
	const void *st;
	bool ok;

	lc_arena_init(&a);
	ck_assert_int_eq(h->model->init(&a, &st), 0);
	ok = bf_search(h, &a, st, 0);
	lc_arena_fini(&a);
	return ok ? LIN : NOT;
}

struct rnd_op {
	const char *name;
	const char *args;
	const char *res[3];	/* possible results; NULL: no result */
};

static const struct rnd_op rnd_cas_register[] = {
	{ "read", "[]", { "[null]", "[1]", "[2]" } },
	{ "write", "[1]", { "[]" } },
	{ "write", "[2]", { "[]" } },
	{ "cas", "[1, 2]", { "[true]", "[false]" } },
	{ "cas", "[2, 1]", { "[true]", "[false]" } },
	{ NULL },
};

static const struct rnd_op rnd_counter[] = {
	{ "read", "[]", { "[0]", "[1]", "[2]" } },
	{ "faa", "[1]", { "[0]", "[1]", "[2]" } },
	{ "cas", "[1, 0]", { "[true]", "[false]" } },
	{ NULL },
};

static const struct rnd_op rnd_mutex[] = {
	{ "lock", "[]", { "[]" } },
	{ "unlock", "[]", { "[]" } },
	{ "trylock", "[]", { "[true]", "[false]" } },
	{ NULL },
};

static const struct rnd_op rnd_queue[] = {
	{ "enq", "[1]", { "[]" } },
	{ "enq", "[2]", { "[]" } },
	{ "deq", "[]", { "[1]", "[2]", "[\"empty\"]" } },
	{ NULL },
};

static const struct rnd_op rnd_map[] = {
	{ "get", "[]", { "[null]", "[1]", "[2]" } },
	{ "put", "[1]", { "[]" } },
	{ "insert", "[2]", { "[true]", "[false]" } },
	{ "update", "[1]", { "[true]", "[false]" } },
	{ "delete", "[]", { "[true]", "[false]" } },
	{ NULL },
};

static const struct rnd_op rnd_append[] = {
	{ "get", "[]", { "[\"\"]", "[\"a\"]", "[\"ab\"]" } },
	{ "append", "[\"a\"]", { "[]" } },
	{ "append", "[\"b\"]", { "[]" } },
	{ "put", "[\"a\"]", { "[]" } },
	{ NULL },
};

static const struct rnd_op rnd_omap[] = {
	{ "get", "[]", { "[null]", "[1]" } },
	{ "put", "[1]", { "[]" } },
	{ "delete", "[]", { "[true]", "[false]" } },
	{ "scan", "[0, 1]", { "[[]]", "[[[0, 1]]]", "[[[0, 1], [1, 1]]]" } },
	{ NULL },
};

static unsigned rnd_next(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(*s >> 33);
}

/*
 * Up to 7 ops on 3 processes with random overlapping intervals, results
 * drawn from small sets so that both verdicts are common; keyed models use
 * keys 0 and 1; some ops never return.
 */
static void rnd_history(const struct rnd_op *ops, bool keyed, uint64_t *seed,
			char *buf, size_t len)
{
	unsigned nops = 0, n = 3 + rnd_next(seed) % 5, p, i, t[3] = { 0 };
	size_t off = 0;

	while (ops[nops].name)
		nops++;
	for (i = 0; i < n; i++) {
		const struct rnd_op *o = &ops[rnd_next(seed) % nops];
		unsigned nres = o->res[2] ? 3 : o->res[1] ? 2 : 1;
		unsigned t0, t1;
		char key[16] = "";

		p = rnd_next(seed) % 3;
		t0 = t[p] + rnd_next(seed) % 4;
		t1 = t0 + rnd_next(seed) % 6;
		t[p] = t1 + 1;
		if (keyed && strcmp(o->name, "scan"))
			snprintf(key, sizeof(key), ",\"key\":%u", rnd_next(seed) % 2);
		off += (size_t)snprintf(buf + off, len - off,
			"{\"t\":%u,\"ev\":\"inv\",\"pid\":%u,\"id\":%u,\"op\":\"%s\",\"args\":%s%s}\n",
			t0, p, i, o->name, o->args, key);
		if (rnd_next(seed) % 8 == 0)
			continue;
		off += (size_t)snprintf(buf + off, len - off,
			"{\"t\":%u,\"ev\":\"ret\",\"pid\":%u,\"id\":%u,\"res\":%s}\n",
			t1, p, i, o->res[rnd_next(seed) % nres]);
	}
}

static void rnd_compare(const char *model, const struct rnd_op *ops, bool keyed)
{
	struct lc_check_opts o = { 0 };
	unsigned k, seen[2] = { 0, 0 };
	uint64_t seed = 42;
	char text[4096];

	for (k = 0; k < 1500; k++) {
		struct lc_history h;
		struct lc_result r;
		struct lc_diag d;
		enum lc_verdict bf;

		rnd_history(ops, keyed, &seed, text, sizeof(text));
		ck_assert_msg(!parse(model, text, LC_FMT_JSONL, &h, &d),
			      "%u: %s in\n%s", d.line, d.msg, text);
		ck_assert_int_eq(lc_check(&h, &o, &r), 0);
		bf = bf_verdict(&h);
		ck_assert_msg(r.verdict == bf, "%s: checker says %d, brute force %d:\n%s",
			      model, r.verdict, bf, text);
		seen[bf == LIN]++;
		lc_result_fini(&r);
		lc_history_fini(&h);
	}
	ck_assert_msg(seen[0] >= 50 && seen[1] >= 50, "%s: %u not, %u linearizable",
		      model, seen[0], seen[1]);
}

START_TEST(test_random_vs_brute_force)
{
	rnd_compare("cas-register", rnd_cas_register, false);
	rnd_compare("counter", rnd_counter, false);
	rnd_compare("mutex", rnd_mutex, false);
	rnd_compare("queue", rnd_queue, false);
	rnd_compare("map", rnd_map, true);
	rnd_compare("append-map", rnd_append, true);
	rnd_compare("ordered-map", rnd_omap, true);
}
END_TEST

static Suite *lincheck_suite(void)
{
	Suite *s = suite_create("lincheck");
	TCase *models = tcase_create("models");
	TCase *formats = tcase_create("formats");
	TCase *search = tcase_create("search");

	tcase_add_test(models, test_register);
	tcase_add_test(models, test_cas_register);
	tcase_add_test(models, test_counter);
	tcase_add_test(models, test_mutex);
	tcase_add_test(models, test_queue);
	tcase_add_test(models, test_map);
	tcase_add_test(models, test_map_partition_report);
	tcase_add_test(models, test_append_map);
	tcase_add_test(models, test_ordered_map);
	tcase_add_test(formats, test_jsonl_events);
	tcase_add_test(formats, test_jsonl_errors);
	tcase_add_test(formats, test_jepsen_formats);
	tcase_add_test(search, test_limits);
	tcase_add_test(search, test_random_vs_brute_force);
	tcase_set_timeout(search, 60);
	suite_add_tcase(s, models);
	suite_add_tcase(s, formats);
	suite_add_tcase(s, search);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(lincheck_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

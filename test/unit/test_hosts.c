/* SPDX-License-Identifier: MIT */
/* Unit tests for loco/hosts.c: hosts file parsing and node options. */
#include <loco/error.h>
#include <loco/hosts.h>

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ERRLEN 512

/* Fills OUT with a pattern so a test can tell it was left alone. */
static void poison(void *out, size_t len)
{
	memset(out, 0xa5, len);
}

static int untouched(const void *out, size_t len)
{
	const unsigned char *p = out;

	for (size_t i = 0; i < len; i++)
		if (p[i] != 0xa5)
			return 0;
	return 1;
}

/* Writes LEN bytes of TEXT to a fresh file under /tmp; PATH receives its name. */
static void write_tmp(char path[64], const char *text, size_t len)
{
	int fd;

	snprintf(path, 64, "/tmp/loco-test-hosts-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
}

/* ---- valid files ---------------------------------------------------------- */

START_TEST(parse_valid_full)
{
	static const char text[] =
		"# loco cluster\n"
		"\n"
		"0 10.0.0.1:7000 compute\n"
		"   \t \n"
		"\t3\tnode-3.example.org:7003\tmemory   # the memory node\n"
		"5 host_5:1            # default role\n"
		"  # indented comment\n"
		"9 127.0.0.1:65535 compute\r\n"
		"2 h2:2#comment right after the port\n";
	struct loco_hosts h;
	char err[ERRLEN] = "";

	ck_assert_int_eq(loco_hosts_parse("hosts.txt", text, &h, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	ck_assert_str_eq(h.path, "hosts.txt");
	ck_assert_uint_eq(h.count, 5);
	ck_assert_uint_eq(h.max_id, 9);

	ck_assert_uint_eq(h.node[0].present, 1);
	ck_assert_uint_eq(h.node[0].id, 0);
	ck_assert_str_eq(h.node[0].host, "10.0.0.1");
	ck_assert_uint_eq(h.node[0].port, 7000);
	ck_assert_uint_eq(h.node[0].role, LOCO_ROLE_COMPUTE);

	ck_assert_uint_eq(h.node[3].present, 1);
	ck_assert_uint_eq(h.node[3].id, 3);
	ck_assert_str_eq(h.node[3].host, "node-3.example.org");
	ck_assert_uint_eq(h.node[3].port, 7003);
	ck_assert_uint_eq(h.node[3].role, LOCO_ROLE_MEMORY);

	ck_assert_uint_eq(h.node[5].present, 1);
	ck_assert_str_eq(h.node[5].host, "host_5");
	ck_assert_uint_eq(h.node[5].port, 1);
	ck_assert_uint_eq(h.node[5].role, LOCO_ROLE_COMPUTE);

	ck_assert_uint_eq(h.node[9].present, 1);
	ck_assert_str_eq(h.node[9].host, "127.0.0.1");
	ck_assert_uint_eq(h.node[9].port, 65535);
	ck_assert_uint_eq(h.node[9].role, LOCO_ROLE_COMPUTE);

	ck_assert_uint_eq(h.node[2].present, 1);
	ck_assert_str_eq(h.node[2].host, "h2");
	ck_assert_uint_eq(h.node[2].port, 2);

	for (int id = 0; id < LOCO_MAX_NODES; id++)
		if (id != 0 && id != 2 && id != 3 && id != 5 && id != 9)
			ck_assert_uint_eq(h.node[id].present, 0);
}
END_TEST

START_TEST(parse_settings)
{
	static const char text[] =
		"0 10.0.0.1:7000 memory rdma_dev=mlx5_1 rdma_port=2 gid_index=3 # RoCE v2\n"
		"1 10.0.0.2:7000 mtu=1024 dm_bytes=128k\n"
		"2 10.0.0.3:7000 compute\n";
	struct loco_hosts h;
	char err[ERRLEN] = "";

	ck_assert_int_eq(loco_hosts_parse("hosts.txt", text, &h, err, sizeof(err)), 0);
	ck_assert_uint_eq(h.node[0].role, LOCO_ROLE_MEMORY);
	ck_assert_uint_eq(h.node[0].line, 1);
	ck_assert_str_eq(h.node[0].opt[LOCO_HOPT_RDMA_DEV], "mlx5_1");
	ck_assert_str_eq(h.node[0].opt[LOCO_HOPT_RDMA_PORT], "2");
	ck_assert_str_eq(h.node[0].opt[LOCO_HOPT_GID_INDEX], "3");
	ck_assert_str_eq(h.node[0].opt[LOCO_HOPT_MTU], "");
	ck_assert_uint_eq(h.node[1].role, LOCO_ROLE_COMPUTE);
	ck_assert_uint_eq(h.node[1].line, 2);
	ck_assert_str_eq(h.node[1].opt[LOCO_HOPT_MTU], "1024");
	ck_assert_str_eq(h.node[1].opt[LOCO_HOPT_DM_BYTES], "128k");
	ck_assert_str_eq(h.node[1].opt[LOCO_HOPT_RDMA_DEV], "");
	for (int k = 0; k < LOCO_HOPT_NR; k++)
		ck_assert_str_eq(h.node[2].opt[k], "");
	ck_assert_str_eq(loco_host_opt_name(LOCO_HOPT_GID_INDEX), "gid_index");
	ck_assert_ptr_null(loco_host_opt_name(LOCO_HOPT_NR));
}
END_TEST

START_TEST(parse_valid_edges)
{
	char host[LOCO_HOST_MAX];
	char text[256];
	struct loco_hosts h;
	char err[ERRLEN];

	/* No final newline, the highest id, the longest host name. */
	memset(host, 'h', LOCO_HOST_MAX - 1);
	host[LOCO_HOST_MAX - 1] = '\0';
	snprintf(text, sizeof(text), "63 %s:80 memory", host);
	ck_assert_int_eq(loco_hosts_parse("h", text, &h, err, sizeof(err)), 0);
	ck_assert_uint_eq(h.count, 1);
	ck_assert_uint_eq(h.max_id, 63);
	ck_assert_str_eq(h.node[63].host, host);
	ck_assert_uint_eq(h.node[63].role, LOCO_ROLE_MEMORY);

	/* Leading zeros are decimal, not octal. */
	ck_assert_int_eq(loco_hosts_parse("h", "010 a:0080\n", &h, err, sizeof(err)), 0);
	ck_assert_uint_eq(h.node[10].present, 1);
	ck_assert_uint_eq(h.node[10].port, 80);
	ck_assert_uint_eq(h.max_id, 10);

	/* A line of exactly 1023 characters is accepted. */
	char *big = malloc(2048);
	ck_assert_ptr_nonnull(big);
	int n = snprintf(big, 2048, "1 a:1 #");
	memset(big + n, 'c', 1023 - n);
	strcpy(big + 1023, "\n");
	ck_assert_int_eq(loco_hosts_parse("h", big, &h, err, sizeof(err)), 0);
	ck_assert_uint_eq(h.node[1].present, 1);
	free(big);
}
END_TEST

/* ---- malformed files ------------------------------------------------------- */

struct bad_case {
	const char *text;
	unsigned int line;
	const char *reason;
};

static const struct bad_case bad_cases[] = {
	{ "0 a:1\n1\n", 2, "missing HOST:PORT field" },
	{ "0 a:1\n1 # no address\n", 2, "missing HOST:PORT field" },
	{ "# c\n0 a:70000\n", 2, "bad port '70000' (must be 1..65535)" },
	{ "0 a:0\n", 1, "bad port '0' (must be 1..65535)" },
	{ "0 a:\n", 1, "bad port '' (must be 1..65535)" },
	{ "0 a:+80\n", 1, "bad port '+80'" },
	{ "0 a:-1\n", 1, "bad port '-1'" },
	{ "0 a:80x\n", 1, "bad port '80x'" },
	{ "0 a:0x50\n", 1, "bad port '0x50'" },
	{ "0 a:99999999999999999999999\n", 1, "bad port '99999999999999999999999'" },
	{ "0 a:b:80\n", 1, "bad port 'b:80'" },
	{ "#\n1 a:1\n\n1 b:2\n", 4, "duplicate node id 1 (first on line 2)" },
	{ "0 a:1\n1 a:2\n\n\n0 a:3 memory\n", 5, "duplicate node id 0 (first on line 1)" },
	{ "0 a:1\n\n\n\n1 a:2 storage\n", 5,
	  "unknown role 'storage' (expected compute, memory or mirror)" },
	{ "0 a:1 Memory\n", 1, "unknown role 'Memory'" },
	{ "99 a:1\n", 1, "node id 99 out of range (0..63)" },
	{ "64 a:1\n", 1, "node id 64 out of range (0..63)" },
	{ "99999999999999999999999 a:1\n", 1,
	  "node id 99999999999999999999999 out of range (0..63)" },
	{ "a1 h:1\n", 1, "bad node id 'a1'" },
	{ "1a h:1\n", 1, "bad node id '1a'" },
	{ "-1 h:1\n", 1, "bad node id '-1'" },
	{ "+1 h:1\n", 1, "bad node id '+1'" },
	{ "0 host80\n", 1, "missing ':' between host and port" },
	{ "0 :80\n", 1, "empty host name" },
	{ "0 hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh:80\n", 1,
	  "host name too long" },
	{ "0 a,b:80\n", 1, "bad character ',' in host name 'a,b'" },
	{ "0 a:1\n1 b:2 compute x\n", 2, "unexpected field 'x' (settings are KEY=VALUE)" },
	{ "0 a:1 memory x y # c\n", 1, "unexpected field 'x'" },
	{ "0 a:1 memory gid_index=1 x\n", 1, "unexpected field 'x'" },
	{ "0 a:1 compute gid=3\n", 1, "unknown setting 'gid' (expected rdma_dev, " },
	{ "0 a:1 mtu=1024 mtu=2048\n", 1, "setting 'mtu' given twice" },
	{ "0 a:1 compute rdma_dev=\n", 1, "setting 'rdma_dev' has an empty value" },
	{ "0 a:1 rdma_dev=mmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmmm\n",
	  1, "setting 'rdma_dev': value longer than 63 bytes" },
	{ "0 a:1 memory rdma_dev=a rdma_port=1 gid_index=2 mtu=3 dm_bytes=4 mtu=5\n",
	  1, "too many fields" },
	{ "0 a:1\n1 b:2 c:3\n", 2, "unknown role 'c:3'" },
};

START_TEST(parse_malformed)
{
	const struct bad_case *c = &bad_cases[_i];
	struct loco_hosts h;
	char err[ERRLEN] = "";
	char want[ERRLEN];

	poison(&h, sizeof(h));
	ck_assert_int_eq(loco_hosts_parse("hosts.txt", c->text, &h, err, sizeof(err)),
			 -LOCO_EHOSTS);
	snprintf(want, sizeof(want), "hosts.txt:%u: %s", c->line, c->reason);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0,
		      "case %d: got \"%s\", want prefix \"%s\"", _i, err, want);
	ck_assert_msg(untouched(&h, sizeof(h)), "case %d: output written on error", _i);
}
END_TEST

START_TEST(parse_line_too_long)
{
	size_t len = 1024;
	char *text = malloc(len + 64);
	struct loco_hosts h;
	char err[ERRLEN];

	ck_assert_ptr_nonnull(text);
	int n = snprintf(text, len + 64, "0 a:1\n# ");
	memset(text + n, 'x', len - 2);
	strcpy(text + n + len - 2, "\n1 b:2\n");
	poison(&h, sizeof(h));
	ck_assert_int_eq(loco_hosts_parse("hosts.txt", text, &h, err, sizeof(err)),
			 -LOCO_EHOSTS);
	ck_assert_str_eq(err, "hosts.txt:2: line too long (1024 characters, max 1023)");
	ck_assert(untouched(&h, sizeof(h)));
	free(text);
}
END_TEST

START_TEST(parse_no_nodes)
{
	struct loco_hosts h;
	char err[ERRLEN];

	poison(&h, sizeof(h));
	ck_assert_int_eq(loco_hosts_parse("hosts.txt", "# nothing\n\n \t\n", &h, err,
					  sizeof(err)), -LOCO_EHOSTS);
	ck_assert_str_eq(err, "hosts.txt: no nodes defined");
	ck_assert_int_eq(loco_hosts_parse("empty.txt", "", &h, err, sizeof(err)),
			 -LOCO_EHOSTS);
	ck_assert_str_eq(err, "empty.txt: no nodes defined");
	ck_assert(untouched(&h, sizeof(h)));
}
END_TEST

START_TEST(parse_small_err_buffer)
{
	struct loco_hosts h;
	char err[8];

	ck_assert_int_eq(loco_hosts_parse("hosts.txt", "x", &h, err, sizeof(err)),
			 -LOCO_EHOSTS);
	ck_assert_str_eq(err, "hosts.t");
	ck_assert_int_eq(loco_hosts_parse("hosts.txt", "x", &h, NULL, 0), -LOCO_EHOSTS);
}
END_TEST

/* ---- loading ------------------------------------------------------------------ */

START_TEST(load_valid)
{
	static const char text[] = "0 127.0.0.1:7000\n1 127.0.0.1:7001 memory\n";
	char path[64];
	struct loco_hosts h;
	char err[ERRLEN];
	int ret;

	write_tmp(path, text, strlen(text));
	ret = loco_hosts_load(path, &h, err, sizeof(err));
	unlink(path);
	ck_assert_int_eq(ret, 0);
	ck_assert_str_eq(h.path, path);
	ck_assert_uint_eq(h.count, 2);
	ck_assert_uint_eq(h.max_id, 1);
	ck_assert_uint_eq(h.node[1].port, 7001);
	ck_assert_uint_eq(h.node[1].role, LOCO_ROLE_MEMORY);
}
END_TEST

START_TEST(load_big_file)
{
	/* Longer than any internal read chunk: many comment lines, then nodes. */
	size_t cap = 200000, len = 0;
	char *text = malloc(cap);
	char path[64];
	struct loco_hosts h;
	char err[ERRLEN];
	int ret;

	ck_assert_ptr_nonnull(text);
	while (len < cap - 2000)
		len += (size_t)snprintf(text + len, cap - len, "# filler line %zu\n", len);
	for (int id = 0; id < LOCO_MAX_NODES; id++)
		len += (size_t)snprintf(text + len, cap - len, "%d n%d:%d\n", id, id,
					1000 + id);
	write_tmp(path, text, len);
	free(text);
	ret = loco_hosts_load(path, &h, err, sizeof(err));
	unlink(path);
	ck_assert_msg(ret == 0, "%s", err);
	ck_assert_uint_eq(h.count, LOCO_MAX_NODES);
	ck_assert_uint_eq(h.max_id, LOCO_MAX_NODES - 1);
	ck_assert_str_eq(h.node[42].host, "n42");
	ck_assert_uint_eq(h.node[42].port, 1042);
}
END_TEST

START_TEST(load_bad_file)
{
	static const char text[] = "0 a:1\n\n2 b:2 storage\n";
	char path[64], want[ERRLEN];
	struct loco_hosts h;
	char err[ERRLEN];
	int ret;

	write_tmp(path, text, strlen(text));
	poison(&h, sizeof(h));
	ret = loco_hosts_load(path, &h, err, sizeof(err));
	unlink(path);
	ck_assert_int_eq(ret, -LOCO_EHOSTS);
	snprintf(want, sizeof(want), "%s:3: unknown role 'storage'", path);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got \"%s\"", err);
	ck_assert(untouched(&h, sizeof(h)));
}
END_TEST

START_TEST(load_missing_file)
{
	struct loco_hosts h;
	char err[ERRLEN];

	poison(&h, sizeof(h));
	ck_assert_int_eq(loco_hosts_load("/nonexistent/loco/hosts.txt", &h, err,
					 sizeof(err)), -LOCO_EHOSTS);
	ck_assert_str_eq(err, "/nonexistent/loco/hosts.txt: cannot open: "
			      "No such file or directory");
	ck_assert(untouched(&h, sizeof(h)));
}
END_TEST

START_TEST(load_directory)
{
	struct loco_hosts h;
	char err[ERRLEN];

	ck_assert_int_eq(loco_hosts_load("/tmp", &h, err, sizeof(err)), -LOCO_EHOSTS);
	ck_assert_msg(strncmp(err, "/tmp: cannot ", 13) == 0, "got \"%s\"", err);
}
END_TEST

START_TEST(load_nul_byte)
{
	static const char text[] = "0 a:1\n\0001 b:2\n";
	char path[64];
	struct loco_hosts h;
	char err[ERRLEN], want[ERRLEN];
	int ret;

	write_tmp(path, text, sizeof(text) - 1);
	ret = loco_hosts_load(path, &h, err, sizeof(err));
	unlink(path);
	ck_assert_int_eq(ret, -LOCO_EHOSTS);
	snprintf(want, sizeof(want), "%s: contains a NUL byte", path);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got \"%s\"", err);
}
END_TEST

/* ---- check_self and role names --------------------------------------------- */

START_TEST(check_self)
{
	struct loco_hosts h;
	char err[ERRLEN] = "";

	ck_assert_int_eq(loco_hosts_parse("hosts.txt", "0 a:1\n7 b:2 memory\n", &h,
					  err, sizeof(err)), 0);
	ck_assert_int_eq(loco_hosts_check_self(&h, 0, err, sizeof(err)), 0);
	ck_assert_int_eq(loco_hosts_check_self(&h, 7, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");

	ck_assert_int_eq(loco_hosts_check_self(&h, 3, err, sizeof(err)), -LOCO_EHOSTS);
	ck_assert_str_eq(err, "hosts.txt: node id 3 is not in the file");
	ck_assert_int_eq(loco_hosts_check_self(&h, -1, err, sizeof(err)), -LOCO_EHOSTS);
	ck_assert_str_eq(err, "hosts.txt: node id -1 is out of range (0..63)");
	ck_assert_int_eq(loco_hosts_check_self(&h, 64, err, sizeof(err)), -LOCO_EHOSTS);
	ck_assert_str_eq(err, "hosts.txt: node id 64 is out of range (0..63)");
}
END_TEST

START_TEST(role_names)
{
	ck_assert_str_eq(loco_role_name(LOCO_ROLE_COMPUTE), "compute");
	ck_assert_str_eq(loco_role_name(LOCO_ROLE_MEMORY), "memory");
	ck_assert_str_eq(loco_role_name(LOCO_ROLE_MIRROR), "mirror");
	ck_assert_str_eq(loco_role_name((enum loco_role)7), "unknown");
}
END_TEST

/* ---- options ------------------------------------------------------------------- */

static const char *const env_names[] = {
	"LOCO_NODE_ID", "LOCO_HOSTS", "LOCO_TRANSPORT", "LOCO_TIMEOUT_MS",
	"LOCO_ARENA_MB", "LOCO_CPU_BIND", "LOCO_MEMORY_NODES",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
	"SLURM_PROCID", "SLURM_NTASKS",
};

static void clear_env(void)
{
	for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
		unsetenv(env_names[i]);
}

#define ARGC(v) ((int)(sizeof(v) / sizeof((v)[0])) - 1)

/* A mirror's line, and --mirror-of, which needs --durable. */
START_TEST(mirror_role_and_option)
{
	struct loco_hosts h;
	struct loco_opts o;
	char err[ERRLEN] = "";
	char *argv[] = { "prog", "--id", "1", "--hosts", "h", "--mirror-of", "0",
			 "--durable", "/tmp/d", NULL };
	char *bad[] = { "prog", "--id", "1", "--hosts", "h", "--mirror-of", "0",
			NULL };
	int argc = ARGC(argv), nbad = ARGC(bad);
	ck_assert_int_eq(loco_hosts_parse("h", "0 a:1 memory\n1 b:2 mirror\n",
					  &h, err, sizeof(err)), 0);
	ck_assert_uint_eq(h.node[1].role, LOCO_ROLE_MIRROR);
	unsetenv("LOCO_MIRROR_OF");
	unsetenv("LOCO_DURABLE_DIR");
	ck_assert_msg(loco_opts_parse(&o, &argc, argv, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert(o.mirror);
	ck_assert_uint_eq(o.mirror_of, 0);
	ck_assert_int_eq(loco_opts_parse(&o, &nbad, bad, err, sizeof(err)),
			 -EINVAL);
	ck_assert_str_eq(err, "--mirror-of needs a durable directory (--durable "
			 "DIR or LOCO_DURABLE_DIR)");
}
END_TEST

START_TEST(opts_argv_both_forms)
{
	char *argv[] = { "prog", "--id", "3", "x", "--hosts=/etc/h", "--transport",
			 "verbs", "--timeout-ms=500", "-v", "--arena-mb", "16", "y",
			 NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN] = "";

	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 3);
	ck_assert_str_eq(o.hosts_path, "/etc/h");
	ck_assert_str_eq(o.transport, "verbs");
	ck_assert_int_eq(o.timeout_ms, 500);
	ck_assert_uint_eq(o.arena_bytes, UINT64_C(16) << 20);
	ck_assert_int_eq(argc, 4);
	ck_assert_str_eq(argv[0], "prog");
	ck_assert_str_eq(argv[1], "x");
	ck_assert_str_eq(argv[2], "-v");
	ck_assert_str_eq(argv[3], "y");
	ck_assert_ptr_null(argv[4]);
}
END_TEST

START_TEST(opts_other_forms)
{
	char *argv[] = { "prog", "--id=1", "--hosts", "h", "--transport=shm-weak",
			 "--timeout-ms", "7", "--arena-mb=1", NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN];

	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 1);
	ck_assert_str_eq(o.hosts_path, "h");
	ck_assert_str_eq(o.transport, "shm-weak");
	ck_assert_int_eq(o.timeout_ms, 7);
	ck_assert_uint_eq(o.arena_bytes, UINT64_C(1) << 20);
	ck_assert_int_eq(argc, 1);
	ck_assert_ptr_null(argv[1]);
}
END_TEST

START_TEST(opts_defaults)
{
	char *argv[] = { "prog", "--id", "0", "--hosts", "h", NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN];

	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 0);
	ck_assert_str_eq(o.transport, "shm");
	ck_assert_int_eq(o.timeout_ms, 10000);
	ck_assert_uint_eq(o.arena_bytes, UINT64_C(256) << 20);
	ck_assert_int_eq(o.cpu_bind, LOCO_CPU_BIND_NONE);
	ck_assert_int_eq(argc, 1);
}
END_TEST

START_TEST(opts_cpu_bind)
{
	char *both[] = { "prog", "--id", "0", "--cpu-bind", "core", "x",
			 "--hosts", "h", NULL };
	char *inline_none[] = { "prog", "--id", "0", "--hosts", "h",
				"--cpu-bind=none", NULL };
	char *plain[] = { "prog", "--id", "0", "--hosts", "h", NULL };
	int argc = ARGC(both);
	struct loco_opts o;
	char err[ERRLEN];

	ck_assert_int_eq(loco_opts_parse(&o, &argc, both, err, sizeof(err)), 0);
	ck_assert_int_eq(o.cpu_bind, LOCO_CPU_BIND_CORE);
	ck_assert_int_eq(argc, 2);
	ck_assert_str_eq(both[1], "x");

	/* The command line wins over the environment, which fills the rest. */
	setenv("LOCO_CPU_BIND", "core", 1);
	argc = ARGC(inline_none);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, inline_none, err, sizeof(err)), 0);
	ck_assert_int_eq(o.cpu_bind, LOCO_CPU_BIND_NONE);
	ck_assert_int_eq(argc, 1);
	argc = ARGC(plain);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, plain, err, sizeof(err)), 0);
	ck_assert_int_eq(o.cpu_bind, LOCO_CPU_BIND_CORE);
}
END_TEST

START_TEST(opts_last_wins_and_lookalikes)
{
	char *argv[] = { "prog", "--id", "1", "--idx", "--id5", "--id=2", "-id",
			 "--hosts=a", "--hosts=b", NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN];

	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 2);
	ck_assert_str_eq(o.hosts_path, "b");
	ck_assert_int_eq(argc, 4);
	ck_assert_str_eq(argv[1], "--idx");
	ck_assert_str_eq(argv[2], "--id5");
	ck_assert_str_eq(argv[3], "-id");
	ck_assert_ptr_null(argv[4]);
}
END_TEST

START_TEST(opts_double_dash)
{
	char *argv[] = { "prog", "--id", "4", "a", "--", "--hosts", "h", "--id=9",
			 NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN];

	/* Options after "--" belong to the program: no hosts file given. */
	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "no hosts file: pass --hosts FILE or set LOCO_HOSTS");
	ck_assert_int_eq(argc, 8);
	ck_assert_str_eq(argv[1], "--id");

	setenv("LOCO_HOSTS", "/env/h", 1);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 4);
	ck_assert_str_eq(o.hosts_path, "/env/h");
	ck_assert_int_eq(argc, 6);
	ck_assert_str_eq(argv[0], "prog");
	ck_assert_str_eq(argv[1], "a");
	ck_assert_str_eq(argv[2], "--");
	ck_assert_str_eq(argv[3], "--hosts");
	ck_assert_str_eq(argv[4], "h");
	ck_assert_str_eq(argv[5], "--id=9");
	ck_assert_ptr_null(argv[6]);
}
END_TEST

START_TEST(opts_env)
{
	char *argv[] = { "prog", "rest", NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN];

	setenv("LOCO_NODE_ID", "12", 1);
	setenv("LOCO_HOSTS", "/env/hosts", 1);
	setenv("LOCO_TRANSPORT", "shm-weak", 1);
	setenv("LOCO_TIMEOUT_MS", "2500", 1);
	setenv("LOCO_ARENA_MB", "64", 1);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 12);
	ck_assert_str_eq(o.hosts_path, "/env/hosts");
	ck_assert_str_eq(o.transport, "shm-weak");
	ck_assert_int_eq(o.timeout_ms, 2500);
	ck_assert_uint_eq(o.arena_bytes, UINT64_C(64) << 20);
	ck_assert_int_eq(argc, 2);
	ck_assert_str_eq(argv[1], "rest");

	/* No argv at all: the environment alone. */
	ck_assert_int_eq(loco_opts_parse(&o, NULL, NULL, err, sizeof(err)), 0);
	ck_assert_int_eq(o.node_id, 12);

	/* An empty variable counts as unset. */
	setenv("LOCO_NODE_ID", "", 1);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "no node id: pass --id N or set LOCO_NODE_ID, or "
			 "start the nodes with a launcher (mpirun, srun) that "
			 "gives each its rank");
}
END_TEST

START_TEST(opts_argv_over_env)
{
	char *argv[] = { "prog", "--id", "2", "--transport=verbs", "--timeout-ms",
			 "9", NULL };
	int argc = ARGC(argv);
	struct loco_opts o;
	char err[ERRLEN];

	setenv("LOCO_NODE_ID", "5", 1);
	setenv("LOCO_HOSTS", "/env/hosts", 1);
	setenv("LOCO_TRANSPORT", "bogus", 1); /* overridden, so never checked */
	setenv("LOCO_TIMEOUT_MS", "abc", 1);
	setenv("LOCO_ARENA_MB", "8", 1);
	ck_assert_msg(loco_opts_parse(&o, &argc, argv, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(o.node_id, 2);
	ck_assert_str_eq(o.hosts_path, "/env/hosts");
	ck_assert_str_eq(o.transport, "verbs");
	ck_assert_int_eq(o.timeout_ms, 9);
	ck_assert_uint_eq(o.arena_bytes, UINT64_C(8) << 20);
	ck_assert_int_eq(argc, 1);
}
END_TEST

struct bad_opt {
	const char *arg;   /* one argument added to "--id 1 --hosts h" */
	const char *env;   /* or NAME=VALUE set in the environment */
	const char *reason;
};

static const struct bad_opt bad_opts[] = {
	{ "--id=a", NULL, "--id: bad node id 'a' (expected 0..63)" },
	{ "--id=64", NULL, "--id: bad node id '64' (expected 0..63)" },
	{ "--id=-1", NULL, "--id: bad node id '-1'" },
	{ "--id=", NULL, "--id: bad node id ''" },
	{ "--timeout-ms=0", NULL, "--timeout-ms: bad timeout in ms '0' (expected 1..2147483647)" },
	{ "--timeout-ms=2147483648", NULL, "--timeout-ms: bad timeout in ms '2147483648'" },
	{ "--timeout-ms= 5", NULL, "--timeout-ms: bad timeout in ms ' 5'" },
	{ "--arena-mb=1x", NULL, "--arena-mb: bad arena size in MiB '1x'" },
	{ "--arena-mb=0", NULL, "--arena-mb: bad arena size in MiB '0'" },
	{ "--arena-mb=17592186044416", NULL, "--arena-mb: bad arena size in MiB" },
	{ "--transport=rdma", NULL,
	  "--transport: unknown transport 'rdma' (expected shm, shm-weak, verbs, ucx, ucx-tcp or ucx-sm)" },
	{ "--hosts=", NULL, "--hosts: empty hosts file path" },
	{ NULL, "LOCO_TIMEOUT_MS=abc", "LOCO_TIMEOUT_MS: bad timeout in ms 'abc'" },
	{ NULL, "LOCO_ARENA_MB=+4", "LOCO_ARENA_MB: bad arena size in MiB '+4'" },
	{ NULL, "LOCO_TRANSPORT=tcp",
	  "LOCO_TRANSPORT: unknown transport 'tcp' (expected shm, shm-weak, verbs, ucx, ucx-tcp or ucx-sm)" },
	{ "--cpu-bind=socket", NULL,
	  "--cpu-bind: unknown CPU binding 'socket' (expected none or core)" },
	{ "--cpu-bind=", NULL, "--cpu-bind: unknown CPU binding ''" },
	{ NULL, "LOCO_CPU_BIND=Core",
	  "LOCO_CPU_BIND: unknown CPU binding 'Core' (expected none or core)" },
};

START_TEST(opts_bad_values)
{
	const struct bad_opt *c = &bad_opts[_i];
	char *argv[] = { "prog", "--id", "1", "--hosts", "h", (char *)c->arg, NULL };
	int argc = c->arg ? 6 : 5;
	struct loco_opts o;
	char err[ERRLEN] = "";

	if (c->env) {
		char name[64];
		const char *eq = strchr(c->env, '=');

		snprintf(name, sizeof(name), "%.*s", (int)(eq - c->env), c->env);
		setenv(name, eq + 1, 1);
	}
	poison(&o, sizeof(o));
	ck_assert_int_eq(loco_opts_parse(&o, &argc, argv, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strncmp(err, c->reason, strlen(c->reason)) == 0,
		      "case %d: got \"%s\", want prefix \"%s\"", _i, err, c->reason);
	ck_assert(untouched(&o, sizeof(o)));
	ck_assert_int_eq(argc, c->arg ? 6 : 5);
	ck_assert_str_eq(argv[1], "--id");
}
END_TEST

START_TEST(opts_missing)
{
	char *no_id[] = { "prog", "--hosts", "h", NULL };
	char *no_hosts[] = { "prog", "--id", "1", NULL };
	char *no_value[] = { "prog", "--hosts", "h", "--id", NULL };
	char *dash_value[] = { "prog", "--id", "1", "--hosts", "--", "x", NULL };
	int argc;
	struct loco_opts o;
	char err[ERRLEN];

	argc = ARGC(no_id);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, no_id, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "no node id: pass --id N or set LOCO_NODE_ID, or "
			 "start the nodes with a launcher (mpirun, srun) that "
			 "gives each its rank");
	ck_assert_int_eq(argc, 3);

	argc = ARGC(no_hosts);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, no_hosts, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "no hosts file: pass --hosts FILE or set LOCO_HOSTS");

	argc = ARGC(no_value);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, no_value, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "missing value for --id");

	argc = ARGC(dash_value);
	ck_assert_int_eq(loco_opts_parse(&o, &argc, dash_value, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "missing value for --hosts");
	ck_assert_int_eq(argc, 6);
}
END_TEST


/* ---- identity from the launcher ----------------------------------------------- */

/* loco_opts_parse of ARGV (NULL-terminated) into O; ERR gets the reason. */
static int parse_v(struct loco_opts *o, char **argv, char *err)
{
	int argc = 0;
	while (argv[argc])
		argc++;
	err[0] = 0;
	return loco_opts_parse(o, &argc, argv, err, ERRLEN);
}

START_TEST(launch_ompi)
{
	struct loco_opts o;
	char err[ERRLEN];
	char *argv[] = { "prog", "--hosts", "h", "--memory-nodes", "1", NULL };
	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	setenv("SLURM_PROCID", "0", 1);   /* an sbatch script's: ignored */
	setenv("SLURM_NTASKS", "1", 1);
	ck_assert_int_eq(parse_v(&o, argv, err), 0);
	ck_assert_int_eq(o.node_id, 2);
	ck_assert_int_eq(o.launch.launcher, LOCO_LAUNCHER_OMPI);
	ck_assert_int_eq(o.launch.size, 4);
	ck_assert_int_eq(o.memory_nodes, 1);
	ck_assert_int_eq(o.launch.pmix, 0);
	ck_assert_str_eq(o.launch.from, "OMPI_COMM_WORLD_RANK=2");
}
END_TEST

START_TEST(launch_id_wins)
{
	struct loco_opts o;
	char err[ERRLEN];
	char *argv[] = { "prog", "--hosts", "h", "--id", "5", NULL };
	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
	ck_assert_int_eq(parse_v(&o, argv, err), 0);
	ck_assert_int_eq(o.node_id, 5);
	ck_assert_int_eq(o.launch.launcher, LOCO_LAUNCHER_NONE);
}
END_TEST

START_TEST(launch_slurm_and_pmix)
{
	struct loco_opts o;
	char err[ERRLEN];
	char *with_hosts[] = { "prog", "--hosts", "h", NULL };
	char *bare[] = { "prog", NULL };
	setenv("SLURM_PROCID", "3", 1);
	setenv("SLURM_NTASKS", "8", 1);
	ck_assert_int_eq(parse_v(&o, with_hosts, err), 0);
	ck_assert_int_eq(o.node_id, 3);
	ck_assert_int_eq(o.launch.launcher, LOCO_LAUNCHER_SLURM);
	ck_assert_int_eq(o.launch.size, 8);
	/* Slurm without PMIx: the addresses need a hosts file. */
	ck_assert_int_eq(parse_v(&o, bare, err), -EINVAL);
	ck_assert_str_eq(err, "no hosts file: pass --hosts FILE or set LOCO_HOSTS "
			 "(without one, nodes find each other through PMIx: "
			 "mpirun, srun --mpi=pmix; PMIX_RANK is not set)");
	/* srun --mpi=pmix: PMIx's rank first, its size comes later. */
	setenv("PMIX_RANK", "6", 1);
	ck_assert_int_eq(parse_v(&o, bare, err), 0);
	ck_assert_int_eq(o.node_id, 6);
	ck_assert_int_eq(o.launch.launcher, LOCO_LAUNCHER_PMIX);
	ck_assert_int_eq(o.launch.size, 0);
	ck_assert_int_eq(o.launch.pmix, 1);
	ck_assert_str_eq(o.hosts_path, "");
}
END_TEST

/* Bad launch environments, each with its message. */
static const struct {
	const char *var[4];   /* NAME, VALUE, NAME, VALUE */
	const char *argv2;    /* an extra argument, or NULL */
	const char *err;
} bad_launch[] = {
	{ { "OMPI_COMM_WORLD_RANK", "4", "OMPI_COMM_WORLD_SIZE", "4" }, NULL,
	  "rank 4 is beyond the job's size 4 (OMPI_COMM_WORLD_RANK=4, "
	  "OMPI_COMM_WORLD_SIZE=4)" },
	{ { "SLURM_PROCID", "9", "SLURM_NTASKS", "2" }, NULL,
	  "rank 9 is beyond the job's size 2 (SLURM_PROCID=9, SLURM_NTASKS=2)" },
	{ { "OMPI_COMM_WORLD_RANK", "1" }, NULL,
	  "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not: not a "
	  "complete launch environment" },
	{ { "OMPI_COMM_WORLD_RANK", "x1", "OMPI_COMM_WORLD_SIZE", "4" }, NULL,
	  "OMPI_COMM_WORLD_RANK: bad value 'x1' (expected a number)" },
	{ { "SLURM_PROCID", "0", "SLURM_NTASKS", "-2" }, NULL,
	  "SLURM_NTASKS: bad value '-2' (expected a number)" },
	{ { "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "65" }, NULL,
	  "OMPI_COMM_WORLD_RANK=0: the job has 65 processes; loco runs at most "
	  "64 nodes" },
	{ { "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4" },
	  "--memory-nodes=4",
	  "4 memory nodes leave no compute node in a job of 4 processes "
	  "(--memory-nodes / LOCO_MEMORY_NODES must be below the job's size)" },
	{ { "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4" },
	  "--memory-nodes=x",
	  "--memory-nodes: bad number of memory nodes 'x' (expected 0..63)" },
};

START_TEST(launch_bad)
{
	struct loco_opts o;
	char err[ERRLEN];
	char *argv[] = { "prog", "--hosts", "h", (char *)bad_launch[_i].argv2,
			 NULL };
	for (int k = 0; k < 4 && bad_launch[_i].var[k]; k += 2)
		setenv(bad_launch[_i].var[k], bad_launch[_i].var[k + 1], 1);
	poison(&o, sizeof(o));
	ck_assert_int_eq(parse_v(&o, argv, err), -EINVAL);
	ck_assert_str_eq(err, bad_launch[_i].err);
	ck_assert(untouched(&o, sizeof(o)));
}
END_TEST

static Suite *hosts_suite(void)
{
	Suite *s = suite_create("hosts");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_test(tc, parse_valid_full);
	tcase_add_test(tc, parse_valid_edges);
	tcase_add_test(tc, parse_settings);
	tcase_add_loop_test(tc, parse_malformed, 0,
			    (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
	tcase_add_test(tc, parse_line_too_long);
	tcase_add_test(tc, parse_no_nodes);
	tcase_add_test(tc, parse_small_err_buffer);
	suite_add_tcase(s, tc);

	tc = tcase_create("load");
	tcase_add_test(tc, load_valid);
	tcase_add_test(tc, load_big_file);
	tcase_add_test(tc, load_bad_file);
	tcase_add_test(tc, load_missing_file);
	tcase_add_test(tc, load_directory);
	tcase_add_test(tc, load_nul_byte);
	tcase_add_test(tc, check_self);
	tcase_add_test(tc, role_names);
	tcase_add_test(tc, mirror_role_and_option);
	suite_add_tcase(s, tc);

	tc = tcase_create("opts");
	tcase_add_checked_fixture(tc, clear_env, clear_env);
	tcase_add_test(tc, opts_argv_both_forms);
	tcase_add_test(tc, opts_other_forms);
	tcase_add_test(tc, opts_defaults);
	tcase_add_test(tc, opts_cpu_bind);
	tcase_add_test(tc, opts_last_wins_and_lookalikes);
	tcase_add_test(tc, opts_double_dash);
	tcase_add_test(tc, opts_env);
	tcase_add_test(tc, opts_argv_over_env);
	tcase_add_loop_test(tc, opts_bad_values, 0,
			    (int)(sizeof(bad_opts) / sizeof(bad_opts[0])));
	tcase_add_test(tc, opts_missing);
	suite_add_tcase(s, tc);

	tc = tcase_create("launch");
	tcase_add_checked_fixture(tc, clear_env, clear_env);
	tcase_add_test(tc, launch_ompi);
	tcase_add_test(tc, launch_id_wins);
	tcase_add_test(tc, launch_slurm_and_pmix);
	tcase_add_loop_test(tc, launch_bad, 0,
			    (int)(sizeof(bad_launch) / sizeof(bad_launch[0])));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(hosts_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0 ? 1 : 0;
}

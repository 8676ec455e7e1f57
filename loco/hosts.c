/* SPDX-License-Identifier: MIT */
/* Hosts file parser and node options (see hosts.h for the formats). */
#include <loco/hosts.h>
#include <loco/error.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_CHARS 1023          /* longest accepted line, without '\n' */
#define HOSTS_FILE_MAX (1024 * 1024) /* a hosts file is small; refuse more */
/* ID HOST:PORT ROLE, every setting once, plus one to report. */
#define MAX_FIELDS (3 + LOCO_HOPT_NR + 1)

static const char *const opt_names[LOCO_HOPT_NR] = {
	[LOCO_HOPT_RDMA_DEV] = "rdma_dev",
	[LOCO_HOPT_RDMA_PORT] = "rdma_port",
	[LOCO_HOPT_GID_INDEX] = "gid_index",
	[LOCO_HOPT_MTU] = "mtu",
	[LOCO_HOPT_DM_BYTES] = "dm_bytes",
};

const char *loco_host_opt_name(enum loco_host_opt opt)
{
	return (unsigned)opt < LOCO_HOPT_NR ? opt_names[opt] : NULL;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Decimal digits only: no sign, no space, no base prefix, no trailing
 * garbage. Returns 0, -EINVAL (not a number) or -ERANGE (above MAX). */
static int parse_num(const char *s, unsigned long long max,
		     unsigned long long *out)
{
	char *end;
	unsigned long long v;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end != '\0')
		return -EINVAL;
	if (errno == ERANGE || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

/* ---- hosts file --------------------------------------------------------- */

struct hosts_parser {
	const char *path;
	unsigned int line;
	char *err;
	size_t errlen;
	unsigned int first_line[LOCO_MAX_NODES]; /* line of each id, 0 if none */
	struct loco_hosts hosts;
};

static int line_err(struct hosts_parser *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Writes "PATH:LINE: reason"; returns -LOCO_EHOSTS for the caller to pass up. */
static int line_err(struct hosts_parser *p, const char *fmt, ...)
{
	char reason[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	set_err(p->err, p->errlen, "%s:%u: %s", p->path, p->line, reason);
	return -LOCO_EHOSTS;
}

static int parse_id(struct hosts_parser *p, const char *s, uint32_t *id)
{
	unsigned long long v;
	int ret = parse_num(s, LOCO_MAX_NODES - 1, &v);

	if (ret == -EINVAL)
		return line_err(p, "bad node id '%s' (expected a number 0..%d)",
				s, LOCO_MAX_NODES - 1);
	if (ret == -ERANGE)
		return line_err(p, "node id %s out of range (0..%d)", s,
				LOCO_MAX_NODES - 1);
	if (p->first_line[v])
		return line_err(p, "duplicate node id %llu (first on line %u)",
				v, p->first_line[v]);
	*id = (uint32_t)v;
	return 0;
}

static bool host_char_ok(char c)
{
	return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

/* "HOST:PORT" into NODE->host and NODE->port. */
static int parse_addr(struct hosts_parser *p, char *s, struct loco_host *node)
{
	char *colon = strchr(s, ':');
	unsigned long long port;
	size_t len;

	if (!colon)
		return line_err(p, "missing ':' between host and port in '%s'", s);
	len = (size_t)(colon - s);
	if (len == 0)
		return line_err(p, "empty host name in '%s'", s);
	if (len >= LOCO_HOST_MAX)
		return line_err(p, "host name too long (%zu bytes, max %d)", len,
				LOCO_HOST_MAX - 1);
	for (size_t i = 0; i < len; i++)
		if (!host_char_ok(s[i]))
			return line_err(p, "bad character '%c' in host name '%.*s'",
					s[i], (int)len, s);
	if (parse_num(colon + 1, 65535, &port) || port == 0)
		return line_err(p, "bad port '%s' (must be 1..65535)", colon + 1);
	memcpy(node->host, s, len);
	node->host[len] = '\0';
	node->port = (uint16_t)port;
	return 0;
}

static int parse_role(struct hosts_parser *p, const char *s, uint8_t *role)
{
	if (!s || strcmp(s, "compute") == 0)
		*role = LOCO_ROLE_COMPUTE;
	else if (strcmp(s, "memory") == 0)
		*role = LOCO_ROLE_MEMORY;
	else if (strcmp(s, "mirror") == 0)
		*role = LOCO_ROLE_MIRROR;
	else
		return line_err(p, "unknown role '%s' (expected compute, memory or "
				"mirror)", s);
	return 0;
}

/* Cuts the comment off LINE and splits it on blanks; returns the field count
 * (at most MAX_FIELDS, enough to notice an extra field). */
static int split_fields(char *line, char *field[MAX_FIELDS])
{
	static const char blanks[] = " \t\r\v\f";
	char *save = NULL;
	char *tok;
	int n = 0;

	line[strcspn(line, "#")] = '\0';
	for (tok = strtok_r(line, blanks, &save); tok && n < MAX_FIELDS;
	     tok = strtok_r(NULL, blanks, &save))
		field[n++] = tok;
	return n;
}

/* Index of S in NAMES (N of them), or -1. */
static int name_index(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return (int)i;
	return -1;
}

/* One KEY=VALUE setting into NODE (values are checked by the transport
 * that uses them, which names this file and line). */
static int parse_opt(struct hosts_parser *p, char *s, struct loco_host *node)
{
	char *eq = strchr(s, '=');
	if (!eq)
		return line_err(p, "unexpected field '%s' (settings are KEY=VALUE)", s);
	*eq = '\0';
	const char *val = eq + 1;
	int k = name_index(opt_names, LOCO_HOPT_NR, s);
	if (k < 0)
		return line_err(p, "unknown setting '%s' (expected rdma_dev, rdma_port, "
				"gid_index, mtu or dm_bytes)", s);
	if (node->opt[k][0])
		return line_err(p, "setting '%s' given twice", s);
	if (!*val)
		return line_err(p, "setting '%s' has an empty value", s);
	if (strlen(val) >= LOCO_HOST_OPT_MAX)
		return line_err(p, "setting '%s': value longer than %d bytes", s,
				LOCO_HOST_OPT_MAX - 1);
	strcpy(node->opt[k], val);
	return 0;
}

static int parse_line(struct hosts_parser *p, char *line)
{
	char *field[MAX_FIELDS];
	struct loco_host node = { .present = 1 };
	int n = split_fields(line, field);
	int ret;

	if (n == 0)
		return 0;
	ret = parse_id(p, field[0], &node.id);
	if (ret)
		return ret;
	if (n < 2)
		return line_err(p, "missing HOST:PORT field after node id %u",
				node.id);
	ret = parse_addr(p, field[1], &node);
	if (ret)
		return ret;
	/* The role may be left out before settings too. */
	int first_opt = n > 2 && !strchr(field[2], '=') ? 3 : 2;
	ret = parse_role(p, first_opt == 3 ? field[2] : NULL, &node.role);
	if (ret)
		return ret;
	if (n == MAX_FIELDS)
		return line_err(p, "too many fields (at most ID HOST:PORT ROLE and "
				"%d settings)", LOCO_HOPT_NR);
	for (int i = first_opt; i < n; i++) {
		ret = parse_opt(p, field[i], &node);
		if (ret)
			return ret;
	}
	node.line = p->line;
	/* Two nodes on one address: the second could never listen, and a
	 * peer would reach the first under the second's id. */
	for (uint32_t i = 0; i < LOCO_MAX_NODES; i++) {
		const struct loco_host *o = &p->hosts.node[i];
		if (o->present && o->port == node.port &&
		    strcmp(o->host, node.host) == 0)
			return line_err(p, "address %s:%u is node %u's already "
					"(line %u)", node.host, node.port, i,
					o->line);
	}

	p->hosts.node[node.id] = node;
	p->first_line[node.id] = p->line;
	p->hosts.count++;
	if (node.id > p->hosts.max_id)
		p->hosts.max_id = node.id;
	return 0;
}

int loco_hosts_parse(const char *path, const char *text, struct loco_hosts *out,
		     char *err, size_t errlen)
{
	/* Parsed apart from OUT, which is written only on success. */
	struct hosts_parser parser = { .path = path ? path : "(hosts)",
				       .err = err, .errlen = errlen };
	struct hosts_parser *p = &parser;
	char line[LINE_MAX_CHARS + 1];
	const char *s = text;
	int ret;

	if (strlen(p->path) >= sizeof(out->path)) {
		set_err(err, errlen, "%s: path too long", p->path);
		return -LOCO_EHOSTS;
	}
	while (s && *s) {
		size_t len = strcspn(s, "\n");

		p->line++;
		if (len > LINE_MAX_CHARS)
			return line_err(p, "line too long (%zu characters, max %d)",
					len, LINE_MAX_CHARS);
		memcpy(line, s, len);
		line[len] = '\0';
		ret = parse_line(p, line);
		if (ret)
			return ret;
		s += len;
		if (*s == '\n')
			s++;
	}
	if (p->hosts.count == 0) {
		set_err(err, errlen, "%s: no nodes defined", p->path);
		return -LOCO_EHOSTS;
	}
	strcpy(p->hosts.path, p->path);
	*out = p->hosts;
	return 0;
}

/* Reads all of FP into a NUL-terminated buffer; returns 0 or -errno. */
static int read_all(FILE *fp, char **out, size_t *outlen)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		size_t n = fread(buf + len, 1, cap - len - 1, fp);

		len += n;
		if (n == 0)
			break;
		if (len + 1 == cap) {
			char *nbuf;

			if (cap >= HOSTS_FILE_MAX) {
				free(buf);
				return -EFBIG;
			}
			nbuf = realloc(buf, cap * 2);
			if (!nbuf) {
				free(buf);
				return -ENOMEM;
			}
			buf = nbuf;
			cap *= 2;
		}
	}
	if (ferror(fp)) {
		int e = errno ? errno : EIO;

		free(buf);
		return -e;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

int loco_hosts_load(const char *path, struct loco_hosts *out, char *err,
		    size_t errlen)
{
	FILE *fp;
	char *text;
	size_t len;
	int ret;

	fp = fopen(path, "r");
	if (!fp) {
		set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -LOCO_EHOSTS;
	}
	errno = 0;
	ret = read_all(fp, &text, &len);
	fclose(fp);
	if (ret) {
		set_err(err, errlen, "%s: cannot read: %s", path, strerror(-ret));
		return -LOCO_EHOSTS;
	}
	if (strlen(text) != len) {
		set_err(err, errlen, "%s: contains a NUL byte (not a text file?)",
			path);
		ret = -LOCO_EHOSTS;
		goto free_text;
	}
	ret = loco_hosts_parse(path, text, out, err, errlen);
free_text:
	free(text);
	return ret;
}

int loco_hosts_check_self(const struct loco_hosts *hosts, int id, char *err,
			  size_t errlen)
{
	if (id < 0 || id >= LOCO_MAX_NODES) {
		set_err(err, errlen, "%s: node id %d is out of range (0..%d)",
			hosts->path, id, LOCO_MAX_NODES - 1);
		return -LOCO_EHOSTS;
	}
	if (!hosts->node[id].present) {
		set_err(err, errlen, "%s: node id %d is not in the file",
			hosts->path, id);
		return -LOCO_EHOSTS;
	}
	return 0;
}

const char *loco_role_name(enum loco_role role)
{
	switch (role) {
	case LOCO_ROLE_COMPUTE:
		return "compute";
	case LOCO_ROLE_MEMORY:
		return "memory";
	case LOCO_ROLE_MIRROR:
		return "mirror";
	}
	return "unknown";
}

/* ---- node options -------------------------------------------------------- */

enum opt_key {
	OPT_ID, OPT_HOSTS, OPT_TRANSPORT, OPT_TIMEOUT, OPT_ARENA, OPT_CPU_BIND,
	OPT_KEY, OPT_INSECURE, OPT_DURABLE, OPT_POWER_CUT, OPT_MIRROR,
	OPT_MEMNODES, OPT_NR
};

static const struct opt_def {
	const char *flag;
	const char *env;
	bool bare;      /* takes no value on the command line (a switch) */
} opt_defs[OPT_NR] = {
	[OPT_ID] = { .flag = "--id", .env = "LOCO_NODE_ID" },
	[OPT_HOSTS] = { .flag = "--hosts", .env = "LOCO_HOSTS" },
	[OPT_TRANSPORT] = { .flag = "--transport", .env = "LOCO_TRANSPORT" },
	[OPT_TIMEOUT] = { .flag = "--timeout-ms", .env = "LOCO_TIMEOUT_MS" },
	[OPT_ARENA] = { .flag = "--arena-mb", .env = "LOCO_ARENA_MB" },
	[OPT_CPU_BIND] = { .flag = "--cpu-bind", .env = "LOCO_CPU_BIND" },
	[OPT_KEY] = { .flag = "--cluster-key", .env = "LOCO_CLUSTER_KEY" },
	[OPT_INSECURE] = { .flag = "--insecure", .env = "LOCO_INSECURE", .bare = true },
	[OPT_DURABLE] = { .flag = "--durable", .env = "LOCO_DURABLE_DIR" },
	[OPT_POWER_CUT] = { .flag = "--power-cut", .env = "LOCO_POWER_CUT", .bare = true },
	[OPT_MIRROR] = { .flag = "--mirror-of", .env = "LOCO_MIRROR_OF" },
	[OPT_MEMNODES] = { .flag = "--memory-nodes", .env = "LOCO_MEMORY_NODES" },
};

static const char *const transports[] = { "shm", "shm-weak", "verbs", "ucx",
					     "ucx-tcp", "ucx-sm" };

#define ARENA_MB_MAX (UINT64_MAX >> 20)

/* Which option ARG is, or -1. *INLINE_VAL is set for the --opt=value form
 * and NULL for --opt (whose value is the next argument). */
static int opt_match(const char *arg, const char **inline_val)
{
	for (int k = 0; k < OPT_NR; k++) {
		size_t n = strlen(opt_defs[k].flag);

		if (strncmp(arg, opt_defs[k].flag, n) != 0)
			continue;
		if (arg[n] == '\0') {
			*inline_val = opt_defs[k].bare ? "1" : NULL;
			return k;
		}
		if (arg[n] == '=' && !opt_defs[k].bare) {
			*inline_val = arg + n + 1;
			return k;
		}
	}
	return -1;
}

/* Collects the last value of each option in ARGV (up to "--") into VAL and
 * the name it came by into SRC. Does not modify ARGV. */
static int opts_scan_argv(int argc, char **argv, const char *val[OPT_NR],
			  const char *src[OPT_NR], char *err, size_t errlen)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		const char *v;
		int k = opt_match(argv[i], &v);

		if (k < 0)
			continue;
		if (!v) {
			if (i + 1 >= argc || strcmp(argv[i + 1], "--") == 0) {
				set_err(err, errlen, "missing value for %s",
					opt_defs[k].flag);
				return -EINVAL;
			}
			v = argv[++i];
		}
		val[k] = v;
		src[k] = opt_defs[k].flag;
	}
	return 0;
}

/* Removes the recognised options from ARGV (already validated by
 * opts_scan_argv), keeping argv[0], "--" and everything after it. */
static void opts_strip_argv(int *argc, char **argv)
{
	int i = 1, j = 1;

	while (i < *argc) {
		const char *v;

		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[j++] = argv[i++];
			break;
		}
		if (opt_match(argv[i], &v) < 0)
			argv[j++] = argv[i++];
		else
			i += v ? 1 : 2;
	}
	argv[j] = NULL;
	*argc = j;
}

static int opt_num(const char *src, const char *what, const char *s,
		   unsigned long long min, unsigned long long max,
		   unsigned long long *out, char *err, size_t errlen)
{
	if (parse_num(s, max, out) || *out < min) {
		set_err(err, errlen, "%s: bad %s '%s' (expected %llu..%llu)", src,
			what, s, min, max);
		return -EINVAL;
	}
	return 0;
}

static int opt_transport(const char *src, const char *s, char *dst, size_t len,
			 char *err, size_t errlen)
{
	if (name_index(transports, sizeof(transports) / sizeof(transports[0]),
		       s) >= 0) {
		snprintf(dst, len, "%s", s);
		return 0;
	}
	set_err(err, errlen,
		"%s: unknown transport '%s' (expected shm, shm-weak, verbs, ucx, ucx-tcp or ucx-sm)",
		src, s);
	return -EINVAL;
}

static const char *const cpu_binds[] = {
	[LOCO_CPU_BIND_NONE] = "none",
	[LOCO_CPU_BIND_CORE] = "core",
};

static int opt_cpu_bind(const char *src, const char *s, int *dst, char *err,
			size_t errlen)
{
	int i = name_index(cpu_binds, sizeof(cpu_binds) / sizeof(cpu_binds[0]), s);
	if (i >= 0) {
		*dst = i;
		return 0;
	}
	set_err(err, errlen,
		"%s: unknown CPU binding '%s' (expected none or core)", src, s);
	return -EINVAL;
}

static int opt_path(const char *src, const char *what, const char *s,
		    char *dst, size_t len, char *err, size_t errlen)
{
	if (s[0] == '\0' || strlen(s) >= len) {
		set_err(err, errlen, "%s: %s %s path", src,
			s[0] ? "too long a" : "empty", what);
		return -EINVAL;
	}
	strcpy(dst, s);
	return 0;
}

/* A switch given as 1 or 0 (the environment's form; the flag means 1). */
static int opt_switch(const char *src, const char *v, int *dst, char *err,
		      size_t errlen)
{
	if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
		set_err(err, errlen, "%s: bad value '%s' (expected 1 or 0)", src, v);
		return -EINVAL;
	}
	*dst = v[0] == '1';
	return 0;
}

/* The cluster key's path and the --insecure switch (LOCO_INSECURE: 1 or 0). */
static int opts_apply_auth(struct loco_opts *o, const char *val[OPT_NR],
			   const char *src[OPT_NR], char *err, size_t errlen)
{
	if (val[OPT_KEY]) {
		int ret = opt_path(src[OPT_KEY], "cluster key", val[OPT_KEY],
				   o->cluster_key, sizeof(o->cluster_key), err,
				   errlen);
		if (ret)
			return ret;
	}
	if (val[OPT_INSECURE])
		return opt_switch(src[OPT_INSECURE], val[OPT_INSECURE],
				  &o->insecure, err, errlen);
	return 0;
}

/* --durable DIR, and --power-cut and --mirror-of ID, which need it. */
static int opts_apply_durable(struct loco_opts *o, const char *val[OPT_NR],
			      const char *src[OPT_NR], char *err, size_t errlen)
{
	unsigned long long n = 0;
	int ret = 0;
	if (val[OPT_DURABLE])
		ret = opt_path(src[OPT_DURABLE], "durable directory",
			       val[OPT_DURABLE], o->durable_dir,
			       sizeof(o->durable_dir), err, errlen);
	if (!ret && val[OPT_POWER_CUT])
		ret = opt_switch(src[OPT_POWER_CUT], val[OPT_POWER_CUT],
				 &o->power_cut, err, errlen);
	if (!ret && val[OPT_MIRROR]) {
		ret = opt_num(src[OPT_MIRROR], "node id", val[OPT_MIRROR], 0,
			      LOCO_MAX_NODES - 1, &n, err, errlen);
		o->mirror = !ret;
		o->mirror_of = (uint32_t)n;
	}
	if (ret)
		return ret;
	const char *needs = o->power_cut ? src[OPT_POWER_CUT] :
			    o->mirror ? src[OPT_MIRROR] : NULL;
	if (needs && !o->durable_dir[0]) {
		set_err(err, errlen, "%s needs a durable directory (--durable DIR "
			"or LOCO_DURABLE_DIR)", needs);
		return -EINVAL;
	}
	return 0;
}

/* Checks each value present in VAL and stores it into O. */
static int opts_apply(struct loco_opts *o, const char *val[OPT_NR],
		      const char *src[OPT_NR], char *err, size_t errlen)
{
	unsigned long long n;
	int ret;

	if (val[OPT_ID]) {
		ret = opt_num(src[OPT_ID], "node id", val[OPT_ID], 0,
			      LOCO_MAX_NODES - 1, &n, err, errlen);
		if (ret)
			return ret;
		o->node_id = (int)n;
	}
	if (val[OPT_HOSTS]) {
		ret = opt_path(src[OPT_HOSTS], "hosts file", val[OPT_HOSTS],
			       o->hosts_path, sizeof(o->hosts_path), err, errlen);
		if (ret)
			return ret;
	}
	if (val[OPT_TRANSPORT]) {
		ret = opt_transport(src[OPT_TRANSPORT], val[OPT_TRANSPORT],
				    o->transport, sizeof(o->transport), err, errlen);
		if (ret)
			return ret;
	}
	if (val[OPT_TIMEOUT]) {
		ret = opt_num(src[OPT_TIMEOUT], "timeout in ms", val[OPT_TIMEOUT],
			      1, INT_MAX, &n, err, errlen);
		if (ret)
			return ret;
		o->timeout_ms = (int)n;
	}
	if (val[OPT_ARENA]) {
		ret = opt_num(src[OPT_ARENA], "arena size in MiB", val[OPT_ARENA],
			      1, ARENA_MB_MAX, &n, err, errlen);
		if (ret)
			return ret;
		o->arena_bytes = (uint64_t)n << 20;
	}
	if (val[OPT_CPU_BIND]) {
		ret = opt_cpu_bind(src[OPT_CPU_BIND], val[OPT_CPU_BIND],
				   &o->cpu_bind, err, errlen);
		if (ret)
			return ret;
	}
	if (val[OPT_MEMNODES]) {
		ret = opt_num(src[OPT_MEMNODES], "number of memory nodes",
			      val[OPT_MEMNODES], 0, LOCO_MAX_NODES - 1, &n, err,
			      errlen);
		if (ret)
			return ret;
		o->memory_nodes = (int)n;
	}
	ret = opts_apply_auth(o, val, src, err, errlen);
	return ret ? ret : opts_apply_durable(o, val, src, err, errlen);
}

/* The id (--id, else the launcher's rank), and where the hosts table
 * comes from (a hosts file, else PMIx); M below the job's size. */
static int opts_identity(struct loco_opts *o, char *err, size_t errlen)
{
	if (o->node_id < 0) {
		int ret = loco_launch_identity(&o->launch, err, errlen);
		if (ret)
			return ret;
		if (o->launch.launcher == LOCO_LAUNCHER_NONE) {
			set_err(err, errlen, "no node id: pass --id N or set "
				"LOCO_NODE_ID, or start the nodes with a launcher "
				"(mpirun, srun) that gives each its rank");
			return -EINVAL;
		}
		o->node_id = o->launch.rank;
	} else {
		const char *pmix = getenv("PMIX_RANK");
		o->launch.pmix = pmix && *pmix;
	}
	if (o->hosts_path[0] == '\0' && !o->launch.pmix) {
		set_err(err, errlen, "no hosts file: pass --hosts FILE or set "
			"LOCO_HOSTS%s", o->launch.launcher ? " (without one, nodes "
			"find each other through PMIx: mpirun, srun --mpi=pmix; "
			"PMIX_RANK is not set)" : "");
		return -EINVAL;
	}
	if (o->memory_nodes >= 0 && o->launch.size &&
	    o->memory_nodes >= o->launch.size) {
		set_err(err, errlen, "%d memory nodes leave no compute node in a "
			"job of %d processes (--memory-nodes / LOCO_MEMORY_NODES "
			"must be below the job's size)", o->memory_nodes,
			o->launch.size);
		return -EINVAL;
	}
	return 0;
}

int loco_opts_parse(struct loco_opts *opts, int *argc, char **argv, char *err,
		    size_t errlen)
{
	struct loco_opts o = {
		.node_id = -1,
		.transport = "shm",
		.timeout_ms = 10000,
		.arena_bytes = UINT64_C(256) << 20,
		.cpu_bind = LOCO_CPU_BIND_NONE,
		.memory_nodes = -1,
		.role = -1,
		.launch = { .rank = -1 },
	};
	const char *val[OPT_NR] = { NULL };
	const char *src[OPT_NR] = { NULL };
	int nargs = argc && argv ? *argc : 0;
	int ret;

	ret = opts_scan_argv(nargs, argv, val, src, err, errlen);
	if (ret)
		return ret;
	/* The environment fills what the command line left unset; an empty
	 * variable counts as unset. */
	for (int k = 0; k < OPT_NR; k++) {
		const char *env = val[k] ? NULL : getenv(opt_defs[k].env);

		if (env && *env) {
			val[k] = env;
			src[k] = opt_defs[k].env;
		}
	}
	ret = opts_apply(&o, val, src, err, errlen);
	if (!ret)
		ret = opts_identity(&o, err, errlen);
	if (ret)
		return ret;
	if (nargs)
		opts_strip_argv(argc, argv);
	*opts = o;
	return 0;
}

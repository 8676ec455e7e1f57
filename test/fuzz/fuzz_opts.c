/* SPDX-License-Identifier: MIT */
/* Fuzz target: node option parsing (loco_opts_parse) and the programs'
 * number parsers (apps/common/opts.c). The input is an argument vector,
 * one argument per line; the loco environment is cleared first. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/opts.h"
#include <loco/hosts.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 32

static const char *const env_names[] = {
	"LOCO_NODE_ID", "LOCO_HOSTS", "LOCO_TRANSPORT", "LOCO_TIMEOUT_MS",
	"LOCO_ARENA_MB", "LOCO_CPU_BIND", "LOCO_CLUSTER_KEY", "LOCO_INSECURE",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	char *argv[MAX_ARGS + 2];
	int argc = 0;
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;
	for (size_t i = 0; i < sizeof(env_names) / sizeof(env_names[0]); i++)
		unsetenv(env_names[i]);
	argv[argc++] = "fuzz";
	for (char *s = buf, *e; s && argc <= MAX_ARGS; s = e) {
		e = strchr(s, '\n');
		if (e)
			*e++ = 0;
		argv[argc++] = s;
	}
	argv[argc] = NULL;
	for (int i = 1; i < argc; i++) {
		unsigned u;
		double d;
		char expect[BENCH_EXPECT_MAX];
		(void)bench_parse_uint(argv[i], 1, 1000000, &u, expect);
		(void)bench_parse_double(argv[i], -1e9, 1e9, &d, expect);
		(void)bench_parse_duration(argv[i], &d, expect);
	}
	struct loco_opts o;
	char err[512] = "";
	int n = argc;
	if (loco_opts_parse(&o, &n, argv, err, sizeof(err)) != 0) {
		if (!err[0])
			abort();       /* every refusal says why */
	} else if (n > argc || argv[n] != NULL) {
		abort();               /* the rest stays a proper argv */
	}
	free(buf);
	return 0;
}

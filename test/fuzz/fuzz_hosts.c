/* SPDX-License-Identifier: MIT */
/* Fuzz target: the hosts-file parser (loco_hosts_parse) and the node-id
 * check after it. The input is the file's text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include <loco/hosts.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;          /* the loader reads a file into a C string */
	struct loco_hosts *h = malloc(sizeof(*h));
	char err[512];
	if (h && loco_hosts_parse("fuzz.hosts", text, h, err, sizeof(err)) == 0) {
		for (int id = -1; id <= LOCO_MAX_NODES; id += 7)
			(void)loco_hosts_check_self(h, id, err, sizeof(err));
	} else if (h && strlen(err) == 0) {
		abort();         /* every refusal says why */
	}
	free(h);
	free(text);
	return 0;
}

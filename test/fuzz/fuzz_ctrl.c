/* SPDX-License-Identifier: MIT */
/* Fuzz target: every control-plane message a node parses. Two nodes run
 * in this process: node 0 with a cluster key, node 2 --insecure. Input:
 * byte 0 picks where the rest goes -
 *   0: raw bytes to node 0's control port (framing, AUTH, AUTH_PROOF, and
 *      everything a process without the key can reach);
 *   1: raw bytes to node 2's port (HELLO, then JOIN/REGION_* requests of
 *      a peer that said hello, as an insecure cluster allows);
 *   2..4: a JOIN, REGION_OPEN or REGION_DROP payload straight into node
 *      0's handler, as from authenticated node 1;
 *   5: a message header (loco_hdr_decode);
 *   6: a REGION_FIND payload into node 0's handler, as from node 1.
 * A node must answer or close; the target waits for the close, so a hang
 * shows up as a libFuzzer timeout. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loco/internal.h"
#include "test/common/cluster1.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct loco_mgr *node[3];
static char hosts[64], key[64], run_dir[64];

static void cleanup(void)
{
	for (int i = 0; i < 3; i++)
		loco_mgr_destroy(node[i]);
	unlink(hosts);
	unlink(key);
	rmdir(run_dir);
}

static struct loco_mgr *start(int id, int insecure)
{
	struct loco_opts o = { .node_id = id, .timeout_ms = 2000,
			       .arena_bytes = 4 << 20, .insecure = insecure,
			       .transport = "shm" };
	struct loco_mgr *m;
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", hosts);
	if (!insecure)
		snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", key);
	if (loco_mgr_create(&o, &m))
		abort();
	return m;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	unsigned char k[32];
	snprintf(hosts, sizeof(hosts), "/tmp/loco-fuzz-hosts-XXXXXX");
	snprintf(key, sizeof(key), "/tmp/loco-fuzz-key-XXXXXX");
	int hfd = mkstemp(hosts), kfd = mkstemp(key);
	if (hfd < 0 || kfd < 0 || getrandom(k, 32, 0) != 32 ||
	    write(kfd, k, 32) != 32)
		abort();
	for (int i = 0; i < 3; i++)
		dprintf(hfd, "%d 127.0.0.1:%d compute\n", i, free_port());
	close(hfd);
	close(kfd);
	snprintf(run_dir, sizeof(run_dir), "/dev/shm/loco-fuzz-%d", (int)getpid());
	setenv("LOCO_RUN_DIR", run_dir, 1);
	loco_log_set_level(LOCO_LOG_ERR);   /* refusals are warnings */
	node[0] = start(0, 0);
	node[2] = start(2, 1);
	atexit(cleanup);
	return 0;
}

/* Send DATA to NODE's port, then wait (bounded) until it closes. */
static void raw(struct loco_mgr *m, const uint8_t *data, size_t size)
{
	const struct loco_host *h = &loco_mgr_hosts(m)->node[loco_mgr_id(m)];
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(h->port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	/* Closed with a reset (linger 0): thousands of connections a second
	 * must not use up the ephemeral ports in TIME_WAIT. */
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		abort();
	for (int tries = 0; connect(fd, (struct sockaddr *)&sa, sizeof(sa)); tries++) {
		if ((errno != EADDRNOTAVAIL && errno != EINTR) || tries == 100)
			abort();  /* the node stopped listening */
		usleep(10000);
	}
	if (size && send(fd, data, size, MSG_NOSIGNAL) < 0) {
		close(fd);
		return;           /* the node closed early: fine */
	}
	shutdown(fd, SHUT_WR);
	char buf[4096];
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, 10000);
		if (n < 0 && errno == EINTR)
			continue; /* libFuzzer's timer */
		if (n <= 0)
			abort();  /* the node neither answered nor closed */
		if (recv(fd, buf, sizeof(buf), 0) <= 0)
			break;
	}
	close(fd);
}

static void handler(int which, const uint8_t *p, size_t len)
{
	struct loco_wbuf reply;
	loco_wbuf_init(&reply);
	if (which == 2)
		loco_channel_handle_join(node[0], 1, p, len, &reply);
	else if (which == 3)
		loco_region_handle_open(node[0], 1, p, len, &reply);
	else if (which == 4)
		loco_region_handle_drop(node[0], 1, p, len, &reply);
	else
		loco_region_handle_find(node[0], 1, p, len, &reply);
	loco_wbuf_fini(&reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *p = data + 1;
	size_t len = size - 1;
	struct loco_msg_hdr h;
	switch (data[0] % 7) {
	case 0:
		raw(node[0], p, len);
		break;
	case 1:
		raw(node[2], p, len);
		break;
	case 2: case 3: case 4: case 6:
		if (len <= LOCO_WIRE_MAX)
			handler(data[0] % 7, p, len);
		break;
	default:
		if (len >= LOCO_MSG_HDR_LEN)
			(void)loco_hdr_decode(p, &h);
		break;
	}
	return 0;
}

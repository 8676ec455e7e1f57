/* SPDX-License-Identifier: MIT */
/* Cluster authentication of the control plane: the key file's checks, the
 * exchange between members, and what a process without the key (or with
 * a wrong one, or lying about its id) gets from a running node: a clear
 * refusal, a closed connection, nothing held, and the node's data intact.
 * The abuse cases speak the wire format by hand (loco/wire.h, loco/auth.h). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loco/auth.h"
#include <loco/error.h>
#include <loco/loco.h>
#include "loco/wire.h"
#include "test/common/cluster.h"
#include "test/common/capture.h"
#include "test/common/key.h"

#define HANG_MS 5000   /* every refusal must come long before this */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int raw_connect(struct cluster *c, uint32_t node)
{
	const struct loco_hosts *h = loco_mgr_hosts(c->mgr[0]);
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(h->node[node].port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Milliseconds until the peer closes FD (reading and dropping whatever it
 * sends), or -1 if it is still open after HANG_MS. */
static int wait_closed(int fd)
{
	uint64_t t0 = now_ms();
	char buf[256];
	while (now_ms() - t0 < HANG_MS) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0)
			return (int)(now_ms() - t0);
	}
	return -1;
}

static void send_all(int fd, const void *p, size_t len)
{
	ck_assert_int_eq(send(fd, p, len, MSG_NOSIGNAL), (ssize_t)len);
}

static void send_msg(int fd, struct loco_sess *s, uint16_t type,
		     const struct loco_wbuf *w)
{
	uint8_t hdr[LOCO_MSG_HDR_LEN], tag[LOCO_MAC_LEN];
	loco_hdr_encode(hdr, type, (uint32_t)w->len);
	send_all(fd, hdr, sizeof(hdr));
	if (w->len)
		send_all(fd, w->p, w->len);
	if (s && s->on) {
		loco_sess_seal(s, hdr, sizeof(hdr), w->p, w->len, tag);
		send_all(fd, tag, sizeof(tag));
	}
}

/* One reply: its type, payload into BUF (returns its length). */
static size_t recv_msg(int fd, uint16_t *type, uint8_t *buf, size_t cap)
{
	uint8_t hdr[LOCO_MSG_HDR_LEN];
	struct loco_msg_hdr h;
	ck_assert_int_eq(recv(fd, hdr, sizeof(hdr), MSG_WAITALL), sizeof(hdr));
	ck_assert_int_eq(loco_hdr_decode(hdr, &h), 0);
	ck_assert_uint_le(h.len, cap);
	if (h.len)
		ck_assert_int_eq(recv(fd, buf, h.len, MSG_WAITALL), h.len);
	*type = h.type;
	return h.len;
}

/* Status and message of a reply. */
static int reply_status(const uint8_t *p, size_t len, char *msg, size_t cap,
			struct loco_rbuf *r)
{
	loco_rbuf_init(r, p, len);
	int st = -(int)loco_get_u32(r);
	loco_get_str(r, msg, cap);
	ck_assert_int_eq(r->err, 0);
	return st;
}

/* Send AUTH as node ID; fills CTX and returns AUTH_CHAL's status. */
static int send_auth(int fd, uint32_t id, struct loco_auth_ctx *ctx,
		     uint8_t mac[LOCO_MAC_LEN], char *msg, size_t cap)
{
	struct loco_wbuf w;
	uint8_t buf[512];
	uint16_t type;
	memset(ctx, 0, sizeof(*ctx));
	ctx->client = id;
	loco_auth_nonce(ctx->nc);
	loco_wbuf_init(&w);
	loco_put_u32(&w, id);
	loco_put_bytes(&w, ctx->nc, LOCO_NONCE_LEN);
	send_msg(fd, NULL, LOCO_MSG_AUTH, &w);
	loco_wbuf_fini(&w);
	size_t n = recv_msg(fd, &type, buf, sizeof(buf));
	ck_assert_uint_eq(type, LOCO_MSG_AUTH_CHAL);
	struct loco_rbuf r;
	int st = reply_status(buf, n, msg, cap, &r);
	if (st)
		return st;
	ctx->server = loco_get_u32(&r);
	ck_assert_uint_eq(loco_get_bytes(&r, ctx->ns, LOCO_NONCE_LEN),
			  LOCO_NONCE_LEN);
	ck_assert_uint_eq(loco_get_bytes(&r, mac, LOCO_MAC_LEN), LOCO_MAC_LEN);
	ck_assert_int_eq(loco_rbuf_done(&r), 0);
	return 0;
}

/* Send PROOF made with KEY; returns AUTH_ACK's status. */
static int send_proof(int fd, const uint8_t key[LOCO_KEY_LEN],
		      const struct loco_auth_ctx *ctx, char *msg, size_t cap)
{
	uint8_t mac[LOCO_MAC_LEN], buf[512];
	uint16_t type;
	struct loco_wbuf w;
	struct loco_rbuf r;
	loco_auth_proof(key, ctx, LOCO_SIDE_CLIENT, mac);
	loco_wbuf_init(&w);
	loco_put_bytes(&w, mac, LOCO_MAC_LEN);
	send_msg(fd, NULL, LOCO_MSG_AUTH_PROOF, &w);
	loco_wbuf_fini(&w);
	size_t n = recv_msg(fd, &type, buf, sizeof(buf));
	ck_assert_uint_eq(type, LOCO_MSG_AUTH_ACK);
	return reply_status(buf, n, msg, cap, &r);
}

static void load_key(const struct cluster *c, uint8_t key[LOCO_KEY_LEN])
{
	char err[256];
	ck_assert_int_eq(loco_key_load(c->key, key, err, sizeof(err)), 0);
}

/* A 2-node cluster (node 2 listed, never started) whose node 1 wrote a
 * pattern into a region on node 0; data_intact checks it after abuse. */
static struct cluster cl;
static struct loco_rregion rr;
static uint64_t pattern[64];

static void start(void)
{
	ck_assert_int_eq(loco_auth_init(), 0);
	ck_assert_int_eq(cluster_start(&cl, 2, 1, 10000), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr[1], 0, "auth.data",
					  sizeof(pattern), &rr), 0);
	ck_assert_int_eq(getrandom(pattern, sizeof(pattern), 0), sizeof(pattern));
	ck_assert_int_eq(loco_write(cl.thr[1], &rr, 0, pattern,
				    sizeof(pattern)), 0);
}

static void data_intact(void)
{
	uint64_t back[64];
	struct loco_rregion again;
	ck_assert_int_eq(loco_read(cl.thr[1], &rr, 0, back, sizeof(back)), 0);
	ck_assert_mem_eq(back, pattern, sizeof(back));
	/* and the node still answers members' requests */
	ck_assert_int_eq(loco_region_open(cl.mgr[1], 0, "auth.data",
					  sizeof(pattern), &again), 0);
	ck_assert_uint_eq(again.off, rr.off);
}

static void stop(void)
{
	cluster_stop(&cl);
}

/* ---- abuse of a running node ---------------------------------------------- */

START_TEST(random_bytes)
{
	uint8_t junk[200];
	int fd = raw_connect(&cl, 0);
	ck_assert_int_eq(getrandom(junk, sizeof(junk), 0), sizeof(junk));
	send_all(fd, junk, sizeof(junk));
	ck_assert_int_ge(wait_closed(fd), 0);
	close(fd);
	data_intact();
}
END_TEST

START_TEST(huge_length)
{
	/* A valid header announcing 4 GiB, then 60000 bytes before auth. */
	static const uint32_t lens[] = { UINT32_MAX, 60000 };
	for (unsigned i = 0; i < 2; i++) {
		uint8_t hdr[LOCO_MSG_HDR_LEN];
		loco_hdr_encode(hdr, LOCO_MSG_AUTH, 0);
		hdr[8] = (uint8_t)lens[i];
		hdr[9] = (uint8_t)(lens[i] >> 8);
		hdr[10] = (uint8_t)(lens[i] >> 16);
		hdr[11] = (uint8_t)(lens[i] >> 24);
		int fd = raw_connect(&cl, 0);
		send_all(fd, hdr, sizeof(hdr));
		ck_assert_int_ge(wait_closed(fd), 0);
		close(fd);
	}
	data_intact();
}
END_TEST

START_TEST(truncated_frame)
{
	uint8_t hdr[LOCO_MSG_HDR_LEN];
	loco_hdr_encode(hdr, LOCO_MSG_AUTH, 40);
	int fd = raw_connect(&cl, 0);
	send_all(fd, hdr, 10);            /* part of a header, then silence */
	int ms = wait_closed(fd);
	ck_assert_int_ge(ms, 0);
	close(fd);
	fd = raw_connect(&cl, 0);
	send_all(fd, hdr, sizeof(hdr));   /* a header, half its payload */
	send_all(fd, "0123456789abcdefghij", 20);
	ck_assert_int_ge(wait_closed(fd), 0);
	close(fd);
	data_intact();
}
END_TEST

START_TEST(silent_connection)
{
	int fd = raw_connect(&cl, 0);
	int ms = wait_closed(fd);
	fprintf(stderr, "test_auth: a silent connection was closed after %d ms\n",
		ms);
	ck_assert_int_ge(ms, 0);
	close(fd);
	data_intact();
}
END_TEST

START_TEST(many_connections)
{
	enum { N = 200 };
	int fd[N];
	for (int i = 0; i < N; i++)
		fd[i] = raw_connect(&cl, 0);
	/* A member is served while 200 strangers hold connections. */
	data_intact();
	for (int i = 0; i < N; i++) {
		ck_assert_int_ge(wait_closed(fd[i]), 0);
		close(fd[i]);
	}
	data_intact();
}
END_TEST

START_TEST(hello_without_auth)
{
	struct loco_wbuf w;
	uint8_t buf[512];
	uint16_t type;
	char msg[192];
	struct loco_rbuf r;
	loco_wbuf_init(&w);
	loco_put_u32(&w, 1);
	loco_put_str(&w, "shm");
	loco_put_u64(&w, 16 << 20);
	loco_put_u64(&w, 0);
	loco_put_bytes(&w, "x", 1);
	int fd = raw_connect(&cl, 0);
	send_msg(fd, NULL, LOCO_MSG_HELLO, &w);
	loco_wbuf_fini(&w);
	size_t n = recv_msg(fd, &type, buf, sizeof(buf));
	ck_assert_uint_eq(type, LOCO_MSG_HELLO_ACK);
	ck_assert_int_eq(reply_status(buf, n, msg, sizeof(msg), &r), -LOCO_EAUTH);
	ck_assert_ptr_nonnull(strstr(msg, "cluster-key"));
	/* no descriptor, nothing but the refusal */
	ck_assert_int_eq(loco_rbuf_done(&r), 0);
	ck_assert_int_ge(wait_closed(fd), 0);
	close(fd);
	data_intact();
}
END_TEST

START_TEST(wrong_key)
{
	struct loco_auth_ctx ctx;
	uint8_t mac[LOCO_MAC_LEN], bad[LOCO_KEY_LEN];
	char msg[192];
	ck_assert_int_eq(getrandom(bad, sizeof(bad), 0), sizeof(bad));
	int fd = raw_connect(&cl, 0);
	uint64_t t0 = now_ms();
	ck_assert_int_eq(send_auth(fd, 1, &ctx, mac, msg, sizeof(msg)), 0);
	/* the node's proof is for the real key, not ours */
	ck_assert(!loco_auth_proof_ok(bad, &ctx, LOCO_SIDE_SERVER, mac));
	ck_assert_int_eq(send_proof(fd, bad, &ctx, msg, sizeof(msg)), -LOCO_EAUTH);
	ck_assert_ptr_nonnull(strstr(msg, "does not match the cluster key"));
	ck_assert_int_ge(wait_closed(fd), 0);
	fprintf(stderr, "test_auth: a wrong key was refused after %d ms\n",
		(int)(now_ms() - t0));
	close(fd);
	data_intact();
}
END_TEST

START_TEST(stranger_ids)
{
	/* Not in the hosts file, the node itself, out of range. */
	static const uint32_t ids[] = { 5, 0, 4000 };
	for (unsigned i = 0; i < 3; i++) {
		struct loco_auth_ctx ctx;
		uint8_t mac[LOCO_MAC_LEN];
		char msg[192];
		int fd = raw_connect(&cl, 0);
		ck_assert_int_eq(send_auth(fd, ids[i], &ctx, mac, msg, sizeof(msg)),
				 -LOCO_EAUTH);
		ck_assert_ptr_nonnull(strstr(msg, "not another node"));
		ck_assert_int_ge(wait_closed(fd), 0);
		close(fd);
	}
	data_intact();
}
END_TEST

/* A member that proved the key as node 2 cannot say HELLO as node 1. */
START_TEST(hello_as_other_member)
{
	struct loco_auth_ctx ctx;
	struct loco_sess s;
	uint8_t key[LOCO_KEY_LEN], mac[LOCO_MAC_LEN], buf[512];
	char msg[192];
	uint16_t type;
	struct loco_rbuf r;
	load_key(&cl, key);
	int fd = raw_connect(&cl, 0);
	ck_assert_int_eq(send_auth(fd, 2, &ctx, mac, msg, sizeof(msg)), 0);
	ck_assert(loco_auth_proof_ok(key, &ctx, LOCO_SIDE_SERVER, mac));
	ck_assert_uint_eq(ctx.server, 0);
	ck_assert_int_eq(send_proof(fd, key, &ctx, msg, sizeof(msg)), 0);
	loco_sess_start(&s, key, &ctx, LOCO_SIDE_CLIENT);
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, 1);
	loco_put_str(&w, "shm");
	loco_put_u64(&w, 16 << 20);
	loco_put_u64(&w, 0);
	loco_put_bytes(&w, "x", 1);
	send_msg(fd, &s, LOCO_MSG_HELLO, &w);
	loco_wbuf_fini(&w);
	/* the refusal is tagged: payload, then 32 bytes */
	size_t n = recv_msg(fd, &type, buf, sizeof(buf));
	ck_assert_uint_eq(type, LOCO_MSG_HELLO_ACK);
	ck_assert_int_eq(reply_status(buf, n, msg, sizeof(msg), &r), -LOCO_EAUTH);
	ck_assert_ptr_nonnull(strstr(msg, "authenticated as node 2"));
	ck_assert_int_ge(wait_closed(fd), 0);
	close(fd);
	loco_sess_end(&s);
	data_intact();
}
END_TEST

/* A tampered message of an authenticated connection closes it. */
START_TEST(bad_session_tag)
{
	struct loco_auth_ctx ctx;
	struct loco_sess s;
	uint8_t key[LOCO_KEY_LEN], mac[LOCO_MAC_LEN];
	char msg[192];
	load_key(&cl, key);
	int fd = raw_connect(&cl, 0);
	ck_assert_int_eq(send_auth(fd, 2, &ctx, mac, msg, sizeof(msg)), 0);
	ck_assert_int_eq(send_proof(fd, key, &ctx, msg, sizeof(msg)), 0);
	loco_sess_start(&s, key, &ctx, LOCO_SIDE_CLIENT);
	s.tx = 7;                 /* a replayed or forged sequence number */
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, 2);
	send_msg(fd, &s, LOCO_MSG_HELLO, &w);
	loco_wbuf_fini(&w);
	ck_assert_int_ge(wait_closed(fd), 0);
	close(fd);
	loco_sess_end(&s);
	data_intact();
}
END_TEST

START_TEST(refusal_logged_once)
{
	struct capture cap;
	static char out[65536];
	capture_start(&cap);
	for (int i = 0; i < 5; i++) {
		int fd = raw_connect(&cl, 0);
		send_all(fd, "GET / HTTP/1.0\r\n\r\n", 18);
		ck_assert_int_ge(wait_closed(fd), 0);
		close(fd);
	}
	capture_end(&cap, out, sizeof(out));
	ck_assert_uint_eq(count_substr(out, "refused a control connection from "
				       "127.0.0.1"), 1);
	data_intact();
}
END_TEST

/* ---- nodes that disagree about the key ------------------------------------ */

/* Start node 1 of CL (listed as absent) with OPTS' key settings. */
static int start_node1(const char *key, int insecure, struct loco_mgr **out)
{
	struct loco_opts o = { .node_id = 1, .timeout_ms = 3000,
			       .arena_bytes = 16 << 20, .insecure = insecure };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", cl.hosts);
	snprintf(o.transport, sizeof(o.transport), "%s",
		 getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") : "shm");
	if (key)
		snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", key);
	return loco_mgr_create(&o, out);
}

static void disagree(const char *key, int insecure, const char *says)
{
	struct loco_mgr *m1;
	struct loco_rregion r;
	struct capture cap;
	static char out[65536];
	ck_assert_int_eq(cluster_start(&cl, 1, 1, 10000), 0);
	capture_start(&cap);
	int rc = start_node1(key, insecure, &m1);
	uint64_t t0 = now_ms();
	int open_rc = rc ? rc : loco_region_open(m1, 0, "auth.x", 64, &r);
	int ms = (int)(now_ms() - t0);
	if (!rc)
		loco_mgr_destroy(m1);
	capture_end(&cap, out, sizeof(out));
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(open_rc, -LOCO_EAUTH);
	ck_assert_int_lt(ms, HANG_MS);
	ck_assert_msg(strstr(out, says), "log lacks '%s': %s", says, out);
	cluster_stop(&cl);
}

START_TEST(other_cluster_key)
{
	char key[64] = "/tmp/loco-auth-other-XXXXXX";
	ck_assert_int_eq(test_key_make(key), 0);
	disagree(key, 0, "does not prove our cluster key");
	unlink(key);
}
END_TEST

START_TEST(insecure_member)
{
	disagree(NULL, 1, "HELLO without the cluster-key exchange");
}
END_TEST

/* ---- the key file --------------------------------------------------------- */

/* Starting a node with KEY (written with LEN bytes, MODE) fails and says
 * WHAT. LEN < 0: KEY is used as is. */
static void key_refused(const char *key, int insecure, const char *what)
{
	struct loco_mgr *m1 = NULL;
	struct capture cap;
	static char out[65536];
	ck_assert_int_eq(cluster_start(&cl, 1, 1, 10000), 0);
	capture_start(&cap);
	int rc = start_node1(key, insecure, &m1);
	capture_end(&cap, out, sizeof(out));
	ck_assert_int_ne(rc, 0);
	ck_assert_ptr_null(m1);
	ck_assert_msg(strstr(out, what), "log lacks '%s': %s", what, out);
	cluster_stop(&cl);
}

static void write_key(char *path, size_t len, mode_t mode)
{
	uint8_t k[64] = { 1 };
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, k, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
}

START_TEST(key_file_checks)
{
	char p[64];
	snprintf(p, sizeof(p), "/tmp/loco-auth-key-XXXXXX");
	write_key(p, 32, 0644);
	key_refused(p, 0, "has mode 0644");
	unlink(p);
	snprintf(p, sizeof(p), "/tmp/loco-auth-key-XXXXXX");
	write_key(p, 31, 0600);
	key_refused(p, 0, "exactly 32 bytes; this file has 31");
	unlink(p);
	snprintf(p, sizeof(p), "/tmp/loco-auth-key-XXXXXX");
	write_key(p, 64, 0600);
	key_refused(p, 0, "this file has more than 32");
	char link[80];
	snprintf(link, sizeof(link), "%s.lnk", p);
	ck_assert_int_eq(symlink(p, link), 0);
	key_refused(link, 0, "symbolic link");
	unlink(link);
	unlink(p);
	key_refused("/nonexistent/loco.key", 0, "cannot open the cluster key");
	key_refused("/tmp", 0, "not a regular file");
	key_refused(NULL, 0, "no cluster key: pass --cluster-key");
}
END_TEST

START_TEST(insecure_warns)
{
	struct loco_mgr *m1 = NULL;
	struct capture cap;
	static char out[65536];
	ck_assert_int_eq(cluster_start(&cl, 1, 1, 10000), 0);
	capture_start(&cap);
	int rc = start_node1(NULL, 1, &m1);
	capture_end(&cap, out, sizeof(out));
	ck_assert_int_eq(rc, 0);
	ck_assert_ptr_nonnull(strstr(out, "runs --insecure"));
	loco_mgr_destroy(m1);
	cluster_stop(&cl);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("auth");
	TCase *abuse = tcase_create("abuse");
	tcase_add_checked_fixture(abuse, start, stop);
	tcase_set_timeout(abuse, 60);
	tcase_add_test(abuse, random_bytes);
	tcase_add_test(abuse, huge_length);
	tcase_add_test(abuse, truncated_frame);
	tcase_add_test(abuse, silent_connection);
	tcase_add_test(abuse, many_connections);
	tcase_add_test(abuse, hello_without_auth);
	tcase_add_test(abuse, wrong_key);
	tcase_add_test(abuse, stranger_ids);
	tcase_add_test(abuse, hello_as_other_member);
	tcase_add_test(abuse, bad_session_tag);
	tcase_add_test(abuse, refusal_logged_once);
	suite_add_tcase(s, abuse);
	TCase *keys = tcase_create("keys");
	tcase_set_timeout(keys, 60);
	tcase_add_test(keys, other_cluster_key);
	tcase_add_test(keys, insecure_member);
	tcase_add_test(keys, key_file_checks);
	tcase_add_test(keys, insecure_warns);
	suite_add_tcase(s, keys);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* SPDX-License-Identifier: MIT */
#include "loco/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Domain labels: a proof can never be mistaken for a session tag or a
 * session key, nor a version-1 value for a later one. */
static const char proof_label[] = "loco-auth-proof-v1";
static const char sess_label[] = "loco-auth-session-v1";

int loco_auth_init(void)
{
	return sodium_init() < 0 ? -EIO : 0;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads all of FD into BUF[CAP]: the byte count, or -errno. One byte more
 * than a key is asked for so that a longer file is seen as such. */
static ssize_t read_all(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;
	while (got < cap) {
		ssize_t n = read(fd, buf + got, cap - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static int key_check_stat(const char *path, const struct stat *st, char *err,
			  size_t errlen)
{
	if (!S_ISREG(st->st_mode)) {
		snprintf(err, errlen, "%s: cluster key is not a regular file", path);
		return -EINVAL;
	}
	if (st->st_uid != geteuid()) {
		snprintf(err, errlen, "%s: cluster key belongs to uid %u, not to "
			 "this user (uid %u)", path, (unsigned)st->st_uid,
			 (unsigned)geteuid());
		return -EPERM;
	}
	if (st->st_mode & (S_IRWXG | S_IRWXO)) {
		snprintf(err, errlen, "%s: cluster key has mode %04o; others may "
			 "read it (chmod 600 %s)", path,
			 (unsigned)(st->st_mode & 07777), path);
		return -EPERM;
	}
	return 0;
}

int loco_key_load(const char *path, uint8_t key[LOCO_KEY_LEN], char *err,
		  size_t errlen)
{
	uint8_t buf[LOCO_KEY_LEN + 1];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		int rc = -errno;
		snprintf(err, errlen, "%s: cannot open the cluster key: %s", path,
			 rc == -ELOOP ? "it is a symbolic link" : strerror(-rc));
		return rc;
	}
	struct stat st;
	int rc = fstat(fd, &st) ? -errno : key_check_stat(path, &st, err, errlen);
	ssize_t n = rc ? 0 : read_all(fd, buf, sizeof(buf));
	close(fd);
	if (!rc && n < 0) {
		rc = (int)n;
		snprintf(err, errlen, "%s: cannot read the cluster key: %s", path,
			 strerror(-rc));
	} else if (!rc && n != LOCO_KEY_LEN) {
		rc = -EINVAL;
		snprintf(err, errlen, "%s: a cluster key is exactly %d bytes; this "
			 "file has %s%zd", path, LOCO_KEY_LEN,
			 n > LOCO_KEY_LEN ? "more than " : "", n > LOCO_KEY_LEN ?
			 (ssize_t)LOCO_KEY_LEN : n);
	}
	if (!rc)
		memcpy(key, buf, LOCO_KEY_LEN);
	sodium_memzero(buf, sizeof(buf));
	return rc;
}

void loco_auth_nonce(uint8_t nonce[LOCO_NONCE_LEN])
{
	randombytes_buf(nonce, LOCO_NONCE_LEN);
}

/* HMAC(KEY, LABEL || side || client || server || nc || ns). */
static void ctx_mac(const uint8_t key[LOCO_KEY_LEN], const char *label,
		    const struct loco_auth_ctx *ctx, uint8_t side,
		    uint8_t out[LOCO_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;
	uint8_t ids[9];
	ids[0] = side;
	put_le32(ids + 1, ctx->client);
	put_le32(ids + 5, ctx->server);
	crypto_auth_hmacsha256_init(&st, key, LOCO_KEY_LEN);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
	crypto_auth_hmacsha256_update(&st, ids, sizeof(ids));
	crypto_auth_hmacsha256_update(&st, ctx->nc, LOCO_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, ctx->ns, LOCO_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

void loco_auth_proof(const uint8_t key[LOCO_KEY_LEN],
		     const struct loco_auth_ctx *ctx, uint8_t side,
		     uint8_t out[LOCO_MAC_LEN])
{
	ctx_mac(key, proof_label, ctx, side, out);
}

bool loco_auth_proof_ok(const uint8_t key[LOCO_KEY_LEN],
			const struct loco_auth_ctx *ctx, uint8_t side,
			const uint8_t mac[LOCO_MAC_LEN])
{
	uint8_t want[LOCO_MAC_LEN];
	ctx_mac(key, proof_label, ctx, side, want);
	bool ok = sodium_memcmp(want, mac, LOCO_MAC_LEN) == 0;
	sodium_memzero(want, sizeof(want));
	return ok;
}

void loco_sess_start(struct loco_sess *s, const uint8_t key[LOCO_KEY_LEN],
		     const struct loco_auth_ctx *ctx, uint8_t side)
{
	/* Both ends derive one key; the side byte in each tag tells the two
	 * directions apart. */
	ctx_mac(key, sess_label, ctx, 0, s->key);
	s->side = side;
	s->tx = s->rx = 0;
	s->on = true;
}

void loco_sess_end(struct loco_sess *s)
{
	sodium_memzero(s, sizeof(*s));
}

static void sess_tag(const struct loco_sess *s, uint8_t side, uint64_t seq,
		     const uint8_t *hdr, size_t hdr_len, const uint8_t *p,
		     size_t len, uint8_t tag[LOCO_MAC_LEN])
{
	crypto_auth_hmacsha256_state st;
	uint8_t pre[9];
	pre[0] = side;
	put_le64(pre + 1, seq);
	crypto_auth_hmacsha256_init(&st, s->key, LOCO_KEY_LEN);
	crypto_auth_hmacsha256_update(&st, pre, sizeof(pre));
	crypto_auth_hmacsha256_update(&st, hdr, hdr_len);
	if (len)
		crypto_auth_hmacsha256_update(&st, p, len);
	crypto_auth_hmacsha256_final(&st, tag);
	sodium_memzero(&st, sizeof(st));
}

static uint8_t other_side(uint8_t side)
{
	return side == LOCO_SIDE_CLIENT ? LOCO_SIDE_SERVER : LOCO_SIDE_CLIENT;
}

void loco_sess_seal(struct loco_sess *s, const uint8_t *hdr, size_t hdr_len,
		    const uint8_t *p, size_t len, uint8_t tag[LOCO_MAC_LEN])
{
	sess_tag(s, s->side, s->tx++, hdr, hdr_len, p, len, tag);
}

bool loco_sess_open(struct loco_sess *s, const uint8_t *hdr, size_t hdr_len,
		    const uint8_t *p, size_t len, const uint8_t tag[LOCO_MAC_LEN])
{
	uint8_t want[LOCO_MAC_LEN];
	sess_tag(s, other_side(s->side), s->rx, hdr, hdr_len, p, len, want);
	bool ok = sodium_memcmp(want, tag, LOCO_MAC_LEN) == 0;
	if (ok)
		s->rx++;
	return ok;
}

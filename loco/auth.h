/* SPDX-License-Identifier: MIT */
/* Cluster authentication of the control plane (docs/formats.md, "Cluster
 * authentication"): the key file, the challenge-response MACs and the
 * per-connection session that tags every later message. HMAC-SHA-256 from
 * libsodium; nothing here is home-made crypto. Not installed. */
#ifndef LOCO_AUTH_H
#define LOCO_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOCO_KEY_LEN   32   /* cluster key file: exactly this many bytes */
#define LOCO_NONCE_LEN 32
#define LOCO_MAC_LEN   32   /* HMAC-SHA-256 */

/* Which side produced a MAC or a message: part of every MAC's input, so
 * that nothing one side sends can be reflected as the other's. */
enum loco_auth_side {
	LOCO_SIDE_CLIENT = 'C',  /* the node that connected */
	LOCO_SIDE_SERVER = 'S',  /* the node that accepted */
};

/* What both proofs and the session key are computed over: the two node
 * ids the exchange binds and both fresh nonces. */
struct loco_auth_ctx {
	uint32_t client, server;
	uint8_t nc[LOCO_NONCE_LEN];   /* the client's nonce */
	uint8_t ns[LOCO_NONCE_LEN];   /* the server's nonce */
};

/* An authenticated connection: every message after the exchange carries
 * HMAC(session key, side, sequence number, header, payload). */
struct loco_sess {
	bool on;
	uint8_t side;                 /* enum loco_auth_side of this end */
	uint8_t key[LOCO_KEY_LEN];
	uint64_t tx, rx;              /* next sequence numbers */
};

/* Initialise libsodium (idempotent, thread-safe): 0 or -EIO. */
int loco_auth_init(void);

/* Read the cluster key at PATH into KEY: a regular file owned by this user,
 * readable by nobody else (mode 0600 or 0400), of exactly LOCO_KEY_LEN
 * bytes. 0, or a negative errno with "PATH: what is wrong" in ERR. */
int loco_key_load(const char *path, uint8_t key[LOCO_KEY_LEN], char *err,
		  size_t errlen);

/* Fill a fresh random nonce. */
void loco_auth_nonce(uint8_t nonce[LOCO_NONCE_LEN]);

/* The proof SIDE gives: HMAC(key, label, side, ids, nonces). */
void loco_auth_proof(const uint8_t key[LOCO_KEY_LEN],
		     const struct loco_auth_ctx *ctx, uint8_t side,
		     uint8_t out[LOCO_MAC_LEN]);
/* Whether MAC is SIDE's proof for CTX (constant-time compare). */
bool loco_auth_proof_ok(const uint8_t key[LOCO_KEY_LEN],
			const struct loco_auth_ctx *ctx, uint8_t side,
			const uint8_t mac[LOCO_MAC_LEN]);

/* Derive the session of one end (SIDE) of the exchange CTX. */
void loco_sess_start(struct loco_sess *s, const uint8_t key[LOCO_KEY_LEN],
		     const struct loco_auth_ctx *ctx, uint8_t side);
void loco_sess_end(struct loco_sess *s);
/* Tag of the next message this end sends (advances tx). */
void loco_sess_seal(struct loco_sess *s, const uint8_t *hdr, size_t hdr_len,
		    const uint8_t *p, size_t len, uint8_t tag[LOCO_MAC_LEN]);
/* Whether TAG is the peer's tag of its next message (advances rx if so). */
bool loco_sess_open(struct loco_sess *s, const uint8_t *hdr, size_t hdr_len,
		    const uint8_t *p, size_t len, const uint8_t tag[LOCO_MAC_LEN]);

#endif

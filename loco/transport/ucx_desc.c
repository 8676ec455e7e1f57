/* SPDX-License-Identifier: MIT */
#include "loco/transport/ucx_desc.h"

#include <errno.h>
#include <string.h>

#include <loco/error.h>
#include "loco/wire.h"

int ucx_desc_pack(const struct ucx_desc *d, void *buf, size_t cap, size_t *len)
{
	if (d->rkey_len > UCX_RKEY_MAX || d->addr_len > UCX_ADDR_MAX)
		return -EMSGSIZE;
	if (!d->rkey_len || !d->addr_len || !d->arena_len || (d->flags & ~UCX_DESC_F_AM))
		return -EINVAL;
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, UCX_DESC_MAGIC);
	loco_put_u16(&w, UCX_DESC_VERSION);
	loco_put_u16(&w, d->flags);
	loco_put_u32(&w, d->node);
	loco_put_u32(&w, d->for_node);
	loco_put_u64(&w, d->arena_addr);
	loco_put_u64(&w, d->arena_len);
	loco_put_u64(&w, d->for_incarnation);
	loco_put_u64(&w, d->cred[0]);
	loco_put_u64(&w, d->cred[1]);
	loco_put_bytes(&w, d->rkey, d->rkey_len);
	loco_put_bytes(&w, d->addr, d->addr_len);
	int rc = w.err;
	if (!rc && w.len > cap)
		rc = -EMSGSIZE;
	if (!rc) {
		memcpy(buf, w.p, w.len);
		*len = w.len;
	}
	loco_wbuf_fini(&w);
	return rc;
}

int ucx_desc_unpack(const void *buf, size_t len, struct ucx_desc *out)
{
	struct loco_rbuf r;
	struct ucx_desc d;
	loco_rbuf_init(&r, buf, len);
	uint32_t magic = loco_get_u32(&r);
	uint16_t version = loco_get_u16(&r);
	d.flags = loco_get_u16(&r);
	d.node = loco_get_u32(&r);
	d.for_node = loco_get_u32(&r);
	d.arena_addr = loco_get_u64(&r);
	d.arena_len = loco_get_u64(&r);
	d.for_incarnation = loco_get_u64(&r);
	d.cred[0] = loco_get_u64(&r);
	d.cred[1] = loco_get_u64(&r);
	d.rkey_len = loco_get_bytes(&r, d.rkey, sizeof(d.rkey));
	d.addr_len = loco_get_bytes(&r, d.addr, sizeof(d.addr));
	if (loco_rbuf_done(&r) || magic != UCX_DESC_MAGIC ||
	    version != UCX_DESC_VERSION || (d.flags & ~UCX_DESC_F_AM) || !d.rkey_len ||
	    !d.addr_len || !d.arena_addr || !d.arena_len ||
	    d.arena_addr + d.arena_len < d.arena_addr)
		return -LOCO_EPROTO;
	*out = d;
	return 0;
}

unsigned ucx_desc_version(const void *buf, size_t len)
{
	struct loco_rbuf r;
	loco_rbuf_init(&r, buf, len);
	uint32_t magic = loco_get_u32(&r);
	uint16_t version = loco_get_u16(&r);
	return r.err || magic != UCX_DESC_MAGIC ? 0 : version;
}

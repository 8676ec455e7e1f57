/* SPDX-License-Identifier: MIT */
/* Control-plane codec: round trips and every length check. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include "loco/wire.h"

START_TEST(round_trip)
{
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u16(&w, 0xbeef);
	loco_put_u32(&w, 0xdeadbeef);
	loco_put_u64(&w, UINT64_C(0x0123456789abcdef));
	loco_put_str(&w, "bar/sst/ov1");
	loco_put_bytes(&w, "\0\1\2", 3);
	ck_assert_int_eq(w.err, 0);
	/* little-endian on the wire whatever the host */
	ck_assert_int_eq(w.p[0], 0xef);
	ck_assert_int_eq(w.p[1], 0xbe);

	struct loco_rbuf r;
	char s[32];
	uint8_t b[8];
	loco_rbuf_init(&r, w.p, w.len);
	ck_assert_uint_eq(loco_get_u16(&r), 0xbeef);
	ck_assert_uint_eq(loco_get_u32(&r), 0xdeadbeef);
	ck_assert_uint_eq(loco_get_u64(&r), UINT64_C(0x0123456789abcdef));
	loco_get_str(&r, s, sizeof(s));
	ck_assert_str_eq(s, "bar/sst/ov1");
	ck_assert_uint_eq(loco_get_bytes(&r, b, sizeof(b)), 3);
	ck_assert_int_eq(b[2], 2);
	ck_assert_int_eq(loco_rbuf_done(&r), 0);
	loco_wbuf_fini(&w);
}
END_TEST

START_TEST(truncated_input)
{
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u64(&w, 7);
	loco_put_str(&w, "abc");
	for (size_t cut = 0; cut < w.len; cut++) {
		struct loco_rbuf r;
		char s[8];
		loco_rbuf_init(&r, w.p, cut);
		loco_get_u64(&r);
		loco_get_str(&r, s, sizeof(s));
		ck_assert_int_eq(loco_rbuf_done(&r), -LOCO_EPROTO);
		ck_assert_str_eq(s, "");
	}
	loco_wbuf_fini(&w);
}
END_TEST

START_TEST(string_checks)
{
	struct loco_wbuf w;
	struct loco_rbuf r;
	char small[4];
	loco_wbuf_init(&w);
	loco_put_str(&w, "toolong");
	loco_rbuf_init(&r, w.p, w.len);
	loco_get_str(&r, small, sizeof(small));
	ck_assert_int_eq(r.err, -LOCO_EPROTO);
	loco_wbuf_fini(&w);

	loco_wbuf_init(&w);
	loco_put_bytes(&w, "a\0b", 3);
	loco_rbuf_init(&r, w.p, w.len);
	char s[8];
	loco_get_str(&r, s, sizeof(s));
	ck_assert_int_eq(r.err, -LOCO_EPROTO);
	loco_wbuf_fini(&w);
}
END_TEST

START_TEST(leftover_bytes)
{
	uint8_t buf[10] = { 0 };
	struct loco_rbuf r;
	loco_rbuf_init(&r, buf, sizeof(buf));
	loco_get_u64(&r);
	ck_assert_int_eq(loco_rbuf_done(&r), -LOCO_EPROTO);
}
END_TEST

START_TEST(write_limit)
{
	struct loco_wbuf w;
	static char big[UINT16_MAX];
	memset(big, 'x', sizeof(big) - 1);
	loco_wbuf_init(&w);
	loco_put_str(&w, big);
	ck_assert_int_eq(w.err, 0);
	loco_put_str(&w, big);
	ck_assert_int_eq(w.err, -E2BIG);
	loco_wbuf_fini(&w);
}
END_TEST

START_TEST(header_checks)
{
	uint8_t h[LOCO_MSG_HDR_LEN];
	struct loco_msg_hdr hdr;
	loco_hdr_encode(h, LOCO_MSG_JOIN, 123);
	ck_assert_int_eq(loco_hdr_decode(h, &hdr), 0);
	ck_assert_uint_eq(hdr.type, LOCO_MSG_JOIN);
	ck_assert_uint_eq(hdr.len, 123);

	loco_hdr_encode(h, LOCO_MSG_JOIN, LOCO_WIRE_MAX + 1);
	ck_assert_int_eq(loco_hdr_decode(h, &hdr), -LOCO_EPROTO);

	loco_hdr_encode(h, LOCO_MSG_JOIN, 1);
	h[4]++; /* version */
	ck_assert_int_eq(loco_hdr_decode(h, &hdr), -LOCO_EVERSION);

	loco_hdr_encode(h, LOCO_MSG_JOIN, 1);
	h[0] ^= 0xff; /* magic */
	ck_assert_int_eq(loco_hdr_decode(h, &hdr), -LOCO_EPROTO);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wire");
	TCase *tc = tcase_create("codec");
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, truncated_input);
	tcase_add_test(tc, string_checks);
	tcase_add_test(tc, leftover_bytes);
	tcase_add_test(tc, write_limit);
	tcase_add_test(tc, header_checks);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

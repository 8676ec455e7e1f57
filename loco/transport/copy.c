/* SPDX-License-Identifier: MIT */
#include "loco/transport/copy.h"

#include <stdatomic.h>
#include <string.h>

void loco_tp_copy_out(uint8_t *remote, const uint8_t *src, uint32_t len)
{
	uint32_t i = 0;
	if ((((uintptr_t)remote ^ (uintptr_t)src) & 7) == 0) {
		for (; i < len && ((uintptr_t)(remote + i) & 7); i++)
			atomic_store_explicit((_Atomic uint8_t *)(remote + i),
					      src[i], memory_order_release); /* pairs with copy_in */
		for (; i + 8 <= len; i += 8) {
			uint64_t v;
			memcpy(&v, src + i, 8);
			atomic_store_explicit((_Atomic uint64_t *)(remote + i), v,
					      memory_order_release); /* pairs with copy_in */
		}
	}
	for (; i < len; i++)
		atomic_store_explicit((_Atomic uint8_t *)(remote + i), src[i],
				      memory_order_release); /* pairs with copy_in */
}

void loco_tp_copy_in(uint8_t *dst, const uint8_t *remote, uint32_t len)
{
	uint32_t i = 0;
	if ((((uintptr_t)remote ^ (uintptr_t)dst) & 7) == 0) {
		for (; i < len && ((uintptr_t)(remote + i) & 7); i++)
			dst[i] = atomic_load_explicit((_Atomic uint8_t *)(remote + i),
						      memory_order_acquire); /* pairs with copy_out */
		for (; i + 8 <= len; i += 8) {
			uint64_t v = atomic_load_explicit(
				(_Atomic uint64_t *)(remote + i),
				memory_order_acquire); /* pairs with copy_out */
			memcpy(dst + i, &v, 8);
		}
	}
	for (; i < len; i++)
		dst[i] = atomic_load_explicit((_Atomic uint8_t *)(remote + i),
					      memory_order_acquire); /* pairs with copy_out */
}

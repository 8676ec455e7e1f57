/* SPDX-License-Identifier: MIT */
/* Copies into and out of memory that other threads or processes access
 * concurrently (an arena, a durable image), as a NIC places them: 8-byte
 * atomic pieces where both sides are aligned the same way, bytes
 * elsewhere; release stores into and acquire loads from the shared side.
 * Every transport that executes requests with a CPU uses them. */
#ifndef LOCO_TRANSPORT_COPY_H
#define LOCO_TRANSPORT_COPY_H

#include <stdint.h>

void loco_tp_copy_out(uint8_t *remote, const uint8_t *src, uint32_t len);
void loco_tp_copy_in(uint8_t *dst, const uint8_t *remote, uint32_t len);

#endif

/* SPDX-License-Identifier: MIT */
/* loco-rtx-transfer: the rTX transfer program on its own (the same as
 * loco-transfer --rtx). */
#include "apps/rtxbench/xfer.h"

int main(int argc, char **argv)
{
	return rtx_transfer_main(argc, argv);
}

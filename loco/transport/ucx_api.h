/* SPDX-License-Identifier: MIT */
/* libucp, loaded at run time (dlopen): a build with UCX's headers runs
 * where UCX is not installed, and --transport ucx then fails with one
 * clear message instead of every loco program failing to start. The
 * entry points the transport uses are resolved once per process into a
 * table with the exact types of UCX's declarations.
 * Internal to the library: every symbol here is hidden. */
#ifndef LOCO_TRANSPORT_UCX_API_H
#define LOCO_TRANSPORT_UCX_API_H

#include <ucp/api/ucp.h>

#pragma GCC visibility push(hidden)

/* Library loaded unless LOCO_UCX_LIB names another file. */
#define UCX_LIB_DEFAULT "libucp.so.0"

/* X(member, symbol): every function the transport calls. */
#define UCX_API_FUNCS(X)                                      \
	X(get_version_string, ucp_get_version_string)         \
	X(config_read, ucp_config_read)                       \
	X(config_modify, ucp_config_modify)                   \
	X(config_release, ucp_config_release)                 \
	X(init_version, ucp_init_version)                     \
	X(cleanup, ucp_cleanup)                               \
	X(context_print_info, ucp_context_print_info)         \
	X(worker_create, ucp_worker_create)                   \
	X(worker_destroy, ucp_worker_destroy)                 \
	X(worker_get_address, ucp_worker_get_address)         \
	X(worker_release_address, ucp_worker_release_address) \
	X(worker_progress, ucp_worker_progress)               \
	X(worker_get_efd, ucp_worker_get_efd)                 \
	X(worker_arm, ucp_worker_arm)                         \
	X(worker_fence, ucp_worker_fence)                     \
	X(worker_flush_nbx, ucp_worker_flush_nbx)             \
	X(worker_set_am_recv_handler, ucp_worker_set_am_recv_handler) \
	X(am_send_nbx, ucp_am_send_nbx)                       \
	X(mem_map, ucp_mem_map)                               \
	X(mem_unmap, ucp_mem_unmap)                           \
	X(mem_query, ucp_mem_query)                           \
	X(rkey_pack, ucp_rkey_pack)                           \
	X(rkey_buffer_release, ucp_rkey_buffer_release)       \
	X(ep_create, ucp_ep_create)                           \
	X(ep_close_nbx, ucp_ep_close_nbx)                     \
	X(ep_flush_nbx, ucp_ep_flush_nbx)                     \
	X(ep_print_info, ucp_ep_print_info)                   \
	X(ep_rkey_unpack, ucp_ep_rkey_unpack)                 \
	X(rkey_destroy, ucp_rkey_destroy)                     \
	X(put_nbx, ucp_put_nbx)                               \
	X(get_nbx, ucp_get_nbx)                               \
	X(atomic_op_nbx, ucp_atomic_op_nbx)                   \
	X(request_check_status, ucp_request_check_status)     \
	X(request_free, ucp_request_free)                     \
	X(status_string, ucs_status_string)

struct ucx_api {
#define UCX_API_MEMBER(member, symbol) __typeof__(symbol) *member;
	UCX_API_FUNCS(UCX_API_MEMBER)
#undef UCX_API_MEMBER
	char path[256];     /* the library that was loaded */
};

/* The table, loading the library on the first call (LOCO_UCX_LIB, else
 * UCX_LIB_DEFAULT). 0, or -ELIBACC with one error logged (library not
 * found, or a symbol missing: UCX older than 1.10); later calls return
 * the first call's result without logging again. */
int ucx_api_get(const struct ucx_api **out);

#pragma GCC visibility pop

#endif

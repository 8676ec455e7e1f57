/* SPDX-License-Identifier: MIT */
#include "loco/transport/ucx_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <loco/log.h>

static struct ucx_api api;
static int api_rc;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static int api_resolve(void *lib, const char *path)
{
#define UCX_API_RESOLVE(member, symbol)                                      \
	api.member = (__typeof__(symbol) *)dlsym(lib, #symbol);             \
	if (!api.member) {                                                    \
		loco_err("ucx", "%s has no %s: loco needs UCX 1.10 or newer "   \
			 "(Debian 12: apt-get install libucx0)", path, #symbol); \
		return -ELIBACC;                                              \
	}
	UCX_API_FUNCS(UCX_API_RESOLVE)
#undef UCX_API_RESOLVE
	return 0;
}

/* Never unloaded: UCX keeps threads and memory hooks of its own. */
static void api_load(void)
{
	const char *env = getenv("LOCO_UCX_LIB");
	const char *path = env && *env ? env : UCX_LIB_DEFAULT;
	void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!lib) {
		loco_err("ucx", "cannot load UCX (%s): %s; install it (Debian 12: "
			 "apt-get install libucx0) or use another --transport",
			 path, dlerror());
		api_rc = -ELIBACC;
		return;
	}
	snprintf(api.path, sizeof(api.path), "%s", path);
	api_rc = api_resolve(lib, path);
}

int ucx_api_get(const struct ucx_api **out)
{
	pthread_once(&api_once, api_load);
	if (api_rc)
		return api_rc;
	*out = &api;
	return 0;
}

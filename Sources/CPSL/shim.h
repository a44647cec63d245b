#ifndef PARLEY_CPSL_SHIM_H
#define PARLEY_CPSL_SHIM_H
/* libpsl: the Public Suffix List, the same library (and data) libcurl links. */
#include <libpsl.h>
#endif

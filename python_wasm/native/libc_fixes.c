/* What the guest's C library needs beside wasi-libc's dlmalloc and musl's
 * libm and string functions (see python_wasm/libc.py). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The allocation functions dlmalloc.c does not define: zig's own would hand
 * dlmalloc's blocks to zig's allocator. */
void *reallocarray(void *ptr, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(ptr, n * size);
}

void *memalign(size_t alignment, size_t size) {
    return aligned_alloc(alignment, size);
}

void *valloc(size_t size) {
    return aligned_alloc(65536, size);
}

/* acosh, musl's (MIT licence) with one change: musl computes acosh(x) for
 * x <= -2 as log(2x - 1/(x + sqrt(x*x-1))), whose argument cancels to a tiny
 * positive number for large negative x, so math.acosh(-1e10) returned a finite
 * value instead of a domain error. Below 1 acosh is undefined: NaN, which
 * CPython reports as "math domain error". (Linked ahead of libpython, so zig's
 * libc never supplies its own.) */
double log(double);
double log1p(double);
double sqrt(double);

double acosh(double x) {
    union {double f; uint64_t i;} u = {.f = x};
    unsigned e = u.i >> 52 & 0x7ff;
    if (x < 1.0) return (x - x) / (x - x);
    if (e < 0x3ff + 1) return log1p(x - 1 + sqrt((x - 1) * (x - 1) + 2 * (x - 1)));
    if (e < 0x3ff + 26) return log(2 * x - 1 / (x + sqrt(x * x - 1)));
    return log(x) + 0.693147180559945309417232121458176568;
}

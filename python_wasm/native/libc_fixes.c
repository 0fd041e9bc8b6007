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

/* acosh: musl computes acosh(x) for x <= -2 as log(2x - 1/(x + sqrt(x*x-1))),
 * whose argument cancels to a tiny positive number for large negative x, so
 * math.acosh(-1e10) returned a finite value instead of a domain error. Below
 * 1 acosh is undefined: NaN (CPython turns it into "math domain error").
 * Linked with --wrap=acosh: CPython's calls to acosh come here. */
double __real_acosh(double x);

double __wrap_acosh(double x) {
    if (x < 1.0) return (x - x) / (x - x);
    return __real_acosh(x);
}

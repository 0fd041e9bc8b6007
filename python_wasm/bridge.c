/* The guest's only door to the host.
 *
 * This file is linked with CPython's static libraries into a WASI *reactor*
 * module. It provides:
 *   - the built-in module `_wasmrun`, whose functions are wasm imports from
 *     the host module "wasmrun" (request/response, blobs, log);
 *   - two exports: `wasmrun_init` (start the interpreter and import the hot
 *     modules; this is the state the snapshot captures) and `wasmrun_run`
 *     (serve exactly one request; a fresh instance is used for every run).
 *
 * Every pointer/length pair crosses to the host, which bounds-checks it
 * against linear memory; nothing here trusts the host either: lengths the
 * host returns are checked against the buffer we offered.
 *
 * The contract (import and export names and signatures, error codes, buffer
 * sizes, guest paths) is declared in wasmrun/abi.py; tests/sandbox/test_abi_drift.py
 * fails when anything here differs from it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define WASMRUN_IMPORT(name) \
    __attribute__((import_module("wasmrun"), import_name(name)))

WASMRUN_IMPORT("request_len") extern int32_t host_request_len(void);
WASMRUN_IMPORT("request_read") extern int32_t host_request_read(uint8_t *buf, int32_t cap);
WASMRUN_IMPORT("respond") extern void host_respond(const uint8_t *buf, int32_t len);
WASMRUN_IMPORT("blob_size") extern int64_t host_blob_size(const uint8_t *id, int32_t id_len);
WASMRUN_IMPORT("blob_read") extern int64_t host_blob_read(const uint8_t *id, int32_t id_len,
                                                          int64_t offset, uint8_t *buf, int32_t cap);
WASMRUN_IMPORT("blob_write") extern int32_t host_blob_write(const uint8_t *data, int32_t len,
                                                            const uint8_t *kind, int32_t kind_len,
                                                            uint8_t *id_out, int32_t id_cap);
WASMRUN_IMPORT("log") extern void host_log(int32_t level, const uint8_t *msg, int32_t len);
/* An HTTP(S) request made by the host (runtime/http.py): the host checks it
 * against the run's grant, performs it and keeps the reply until the guest
 * fetches it with `http_reply_read`. Returns the reply's length. */
WASMRUN_IMPORT("http_request") extern int64_t host_http_request(const uint8_t *meta, int32_t meta_len,
                                                                const uint8_t *body, int32_t body_len);
WASMRUN_IMPORT("http_reply_read") extern int32_t host_http_reply_read(uint8_t *buf, int32_t cap);
/* Packages installed on demand (runtime/packages.py): the host resolves and mounts them
 * and keeps its JSON reply for `packages_reply_read`. Returns the reply's length. */
WASMRUN_IMPORT("packages_install") extern int64_t host_packages_install(const uint8_t *req, int32_t req_len);
WASMRUN_IMPORT("packages_reply_read") extern int32_t host_packages_reply_read(uint8_t *buf, int32_t cap);
/* Code mode (runtime/tools.py): a batch of the client's tools called together,
 * as JSON; the run waits in the host until the client answers, and the reply
 * (JSON) waits for `tool_reply_read`. Returns the reply's length. */
WASMRUN_IMPORT("tool_call") extern int64_t host_tool_call(const uint8_t *calls, int32_t calls_len);
WASMRUN_IMPORT("tool_reply_read") extern int32_t host_tool_reply_read(uint8_t *buf, int32_t cap);

/* wasi-libc caches the preopened directories on first use. The snapshot
 * was taken with the build's preopens; each run has its own (/skills/...,
 * /workspace), so the table is scanned afresh at the start of every run. */
extern void __wasilibc_reset_preopens(void);

/* Negative results from the host (wasmrun/abi.py). */
#define HOST_ENOENT (-1)  /* no such blob, or not granted to this run */
#define HOST_EBUDGET (-2) /* the run's blob byte budget is spent */
#define HOST_EINVAL (-3)  /* bad argument (e.g. range, kind) */
#define MAX_BLOB_ID 128   /* bytes of a blob id, at most */

static PyObject *host_error(int64_t code) {
    switch (code) {
    case HOST_ENOENT:
        PyErr_SetString(PyExc_KeyError, "blob not found or not mounted in this run");
        break;
    case HOST_EBUDGET:
        PyErr_SetString(PyExc_OSError, "blob transfer budget for this run exceeded");
        break;
    default:
        PyErr_Format(PyExc_ValueError, "host call failed (code %lld)", (long long)code);
    }
    return NULL;
}

/* Small requests and responses travel through this buffer instead of host
 * calls: the host writes the request here before calling `wasmrun_run` and
 * reads the response from here after it returns. Each host call costs more
 * than the whole copy. Larger ones fall back to the host calls. */
#define IO_CAPACITY (64 * 1024)
static uint8_t io_buffer[IO_CAPACITY];
static int32_t io_request_len = -1;   /* set by wasmrun_run; -1: ask the host */
static int32_t io_response_len = -1;  /* set by respond(); -1: sent by host call */

__attribute__((export_name("wasmrun_io_buffer"))) uint8_t *wasmrun_io_buffer(void) {
    return io_buffer;
}

__attribute__((export_name("wasmrun_io_capacity"))) int32_t wasmrun_io_capacity(void) {
    return IO_CAPACITY;
}

/* stdout and stderr collect here, in order, and the host reads what is left
 * straight from memory after the run, even after a trap: a print costs a
 * memcpy, not a host call. When the buffer is full it is flushed to fd 1
 * (a WASI write the host captures). */
#define OUT_CAPACITY (64 * 1024)
static uint8_t out_buffer[OUT_CAPACITY];
static int32_t out_len = 0;

__attribute__((export_name("wasmrun_out_buffer"))) uint8_t *wasmrun_out_buffer(void) {
    return out_buffer;
}

__attribute__((export_name("wasmrun_out_len"))) int32_t *wasmrun_out_len(void) {
    return &out_len;
}

__attribute__((export_name("wasmrun_out_capacity"))) int32_t wasmrun_out_capacity(void) {
    return OUT_CAPACITY;
}

static void write_all(const uint8_t *data, size_t len) {
    while (len > 0) {
        ssize_t n = write(1, data, len);
        if (n <= 0) return;  /* nowhere to put it: the host stopped capturing */
        data += n;
        len -= (size_t)n;
    }
}

static void out_flush(void) {
    /* Zero the fill first: on a direct write to fd 1/2 the host drains this
     * buffer before the written bytes, so it must not see them twice. */
    int32_t n = out_len;
    out_len = 0;
    if (n > 0) write_all(out_buffer, (size_t)n);
}

static PyObject *wr_out_write(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (out_len + view.len > OUT_CAPACITY) out_flush();
    if (view.len > OUT_CAPACITY) {
        write_all(view.buf, (size_t)view.len);
    } else {
        memcpy(out_buffer + out_len, view.buf, view.len);
        out_len += (int32_t)view.len;
    }
    Py_ssize_t written = view.len;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(written);
}

static PyObject *wr_out_flush(PyObject *self, PyObject *noargs) {
    out_flush();
    Py_RETURN_NONE;
}

static PyObject *wr_request(PyObject *self, PyObject *noargs) {
    if (io_request_len >= 0 && io_request_len <= IO_CAPACITY)
        return PyBytes_FromStringAndSize((const char *)io_buffer, io_request_len);
    int32_t len = host_request_len();
    if (len < 0) return host_error(len);
    PyObject *out = PyBytes_FromStringAndSize(NULL, len);
    if (out == NULL) return NULL;
    int32_t got = host_request_read((uint8_t *)PyBytes_AS_STRING(out), len);
    if (got != len) {
        Py_DECREF(out);
        return host_error(got < 0 ? got : HOST_EINVAL);
    }
    return out;
}

static PyObject *wr_respond(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (view.len > INT32_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_OverflowError, "response too large");
        return NULL;
    }
    if (view.len <= IO_CAPACITY) {
        memcpy(io_buffer, view.buf, view.len);
        io_response_len = (int32_t)view.len;
    } else {
        host_respond(view.buf, (int32_t)view.len);
        io_response_len = -1;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyObject *wr_blob_size(PyObject *self, PyObject *args) {
    const char *id;
    Py_ssize_t id_len;
    if (!PyArg_ParseTuple(args, "s#", &id, &id_len)) return NULL;
    int64_t size = host_blob_size((const uint8_t *)id, (int32_t)id_len);
    if (size < 0) return host_error(size);
    return PyLong_FromLongLong(size);
}

static PyObject *wr_blob_read(PyObject *self, PyObject *args) {
    const char *id;
    Py_ssize_t id_len;
    long long offset;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "s#Ln", &id, &id_len, &offset, &cap)) return NULL;
    if (offset < 0 || cap < 0 || cap > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "offset and length must be non-negative");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, cap);
    if (out == NULL) return NULL;
    int64_t got;
    Py_BEGIN_ALLOW_THREADS
    got = host_blob_read((const uint8_t *)id, (int32_t)id_len, offset,
                         (uint8_t *)PyBytes_AS_STRING(out), (int32_t)cap);
    Py_END_ALLOW_THREADS
    if (got < 0 || got > cap) {
        Py_DECREF(out);
        return host_error(got < 0 ? got : HOST_EINVAL);
    }
    if (got != cap && _PyBytes_Resize(&out, (Py_ssize_t)got) < 0) return NULL;
    return out;
}

static PyObject *wr_blob_write(PyObject *self, PyObject *args) {
    Py_buffer data;
    const char *kind;
    Py_ssize_t kind_len;
    if (!PyArg_ParseTuple(args, "y*s#", &data, &kind, &kind_len)) return NULL;
    if (data.len > INT32_MAX) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_OverflowError, "blob too large for one write");
        return NULL;
    }
    uint8_t id[MAX_BLOB_ID];
    int32_t n = host_blob_write(data.buf, (int32_t)data.len, (const uint8_t *)kind,
                                (int32_t)kind_len, id, (int32_t)sizeof id);
    PyBuffer_Release(&data);
    if (n < 0 || n > (int32_t)sizeof id) return host_error(n < 0 ? n : HOST_EINVAL);
    return PyUnicode_DecodeUTF8((const char *)id, n, "strict");
}

static PyObject *wr_log(PyObject *self, PyObject *args) {
    int level;
    const char *msg;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "is#", &level, &msg, &len)) return NULL;
    host_log(level, (const uint8_t *)msg, len > INT32_MAX ? INT32_MAX : (int32_t)len);
    Py_RETURN_NONE;
}

/* http_request(meta_json: bytes, body: bytes) -> bytes: the host's reply,
 * 4-byte little-endian length of its JSON head, the head, then the body. */
static PyObject *wr_http_request(PyObject *self, PyObject *args) {
    Py_buffer meta, body;
    if (!PyArg_ParseTuple(args, "y*y*", &meta, &body)) return NULL;
    if (meta.len > INT32_MAX || body.len > INT32_MAX) {
        PyBuffer_Release(&meta);
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_OverflowError, "request too large");
        return NULL;
    }
    int64_t len;
    Py_BEGIN_ALLOW_THREADS
    len = host_http_request(meta.buf, (int32_t)meta.len, body.buf, (int32_t)body.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&meta);
    PyBuffer_Release(&body);
    if (len < 0 || len > INT32_MAX) return host_error(len < 0 ? len : HOST_EINVAL);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (out == NULL) return NULL;
    int32_t got = host_http_reply_read((uint8_t *)PyBytes_AS_STRING(out), (int32_t)len);
    if (got != len) {
        Py_DECREF(out);
        return host_error(got < 0 ? got : HOST_EINVAL);
    }
    return out;
}

/* tool_call(calls_json: bytes) -> bytes: the answers' JSON (runtime/tools.py). */
static PyObject *wr_tool_call(PyObject *self, PyObject *arg) {
    Py_buffer calls;
    if (!PyArg_Parse(arg, "y*", &calls)) return NULL;
    if (calls.len > INT32_MAX) {
        PyBuffer_Release(&calls);
        PyErr_SetString(PyExc_OverflowError, "tool calls too large");
        return NULL;
    }
    int64_t len;
    Py_BEGIN_ALLOW_THREADS
    len = host_tool_call(calls.buf, (int32_t)calls.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&calls);
    if (len < 0 || len > INT32_MAX) return host_error(len < 0 ? len : HOST_EINVAL);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (out == NULL) return NULL;
    int32_t got = host_tool_reply_read((uint8_t *)PyBytes_AS_STRING(out), (int32_t)len);
    if (got != len) {
        Py_DECREF(out);
        return host_error(got < 0 ? got : HOST_EINVAL);
    }
    return out;
}

/* packages_install(request_json: bytes) -> bytes: the host's JSON reply. */
static PyObject *wr_packages_install(PyObject *self, PyObject *arg) {
    Py_buffer req;
    if (PyObject_GetBuffer(arg, &req, PyBUF_SIMPLE) < 0) return NULL;
    if (req.len > INT32_MAX) {
        PyBuffer_Release(&req);
        PyErr_SetString(PyExc_OverflowError, "request too large");
        return NULL;
    }
    int64_t len;
    Py_BEGIN_ALLOW_THREADS
    len = host_packages_install(req.buf, (int32_t)req.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&req);
    if (len < 0 || len > INT32_MAX) return host_error(len < 0 ? len : HOST_EINVAL);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (out == NULL) return NULL;
    int32_t got = host_packages_reply_read((uint8_t *)PyBytes_AS_STRING(out), (int32_t)len);
    if (got != len) {
        Py_DECREF(out);
        return host_error(got < 0 ? got : HOST_EINVAL);
    }
    return out;
}

static PyMethodDef wr_methods[] = {
    {"request", wr_request, METH_NOARGS, "request() -> bytes: this run's request."},
    {"respond", wr_respond, METH_O, "respond(bytes): hand the run's result to the host."},
    {"blob_size", wr_blob_size, METH_VARARGS, "blob_size(id) -> int"},
    {"blob_read", wr_blob_read, METH_VARARGS, "blob_read(id, offset, length) -> bytes"},
    {"blob_write", wr_blob_write, METH_VARARGS, "blob_write(data, kind) -> blob id"},
    {"log", wr_log, METH_VARARGS, "log(level, message)"},
    {"http_request", wr_http_request, METH_VARARGS, "http_request(meta, body) -> reply bytes"},
    {"out_write", wr_out_write, METH_O, "out_write(bytes) -> int: append to the run's output."},
    {"out_flush", wr_out_flush, METH_NOARGS, "out_flush(): hand buffered output to the host now."},
    {"packages_install", wr_packages_install, METH_O, "packages_install(request) -> reply bytes"},
    {"tool_call", wr_tool_call, METH_O, "tool_call(calls_json) -> answers_json: the client's tools"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef wr_module = {
    PyModuleDef_HEAD_INIT, "_wasmrun", "Host calls of the wasmrun sandbox.", -1, wr_methods,
};

/* Stopping a run with a traceback: when a run goes over its CPU or time limit,
 * the host calls `wasmrun_interrupt` (from its epoch callback) before it stops
 * the run hard. That schedules a pending call, which the interpreter makes at
 * its next eval-breaker check (a loop's back edge, a call), in the frame that is
 * running: `_wasmrun.RunStopped` (a BaseException) is raised there, and the
 * runtime sends its traceback back. Code that swallows it is still stopped hard
 * when the host's short grace is over. */
static PyObject *run_stopped;

static int raise_run_stopped(void *unused) {
    (void)unused;
    PyErr_SetString(run_stopped, "the run was stopped at its limit");
    return -1;
}

__attribute__((export_name("wasmrun_interrupt"))) void wasmrun_interrupt(void) {
    if (run_stopped != NULL) Py_AddPendingCall(raise_run_stopped, NULL);
}

static PyObject *PyInit__wasmrun(void) {
    PyObject *m = PyModule_Create(&wr_module);
    if (m == NULL) return NULL;
    PyModule_AddIntConstant(m, "ENOENT", HOST_ENOENT);
    PyModule_AddIntConstant(m, "EBUDGET", HOST_EBUDGET);
    run_stopped = PyErr_NewException("_wasmrun.RunStopped", PyExc_BaseException, NULL);
    if (run_stopped == NULL || PyModule_AddObjectRef(m, "RunStopped", run_stopped) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* Built-in modules compiled beside libpython (see build.py: native_objects). */
extern PyObject *PyInit_zlib(void);
extern PyObject *PyInit__sqlite3(void);
extern PyObject *PyInit__bz2(void);
extern PyObject *PyInit__lzma(void);

/* sum() with a 64-bit running total (native/builtin_sum.c). */
extern int wasmrun_install_builtin_sum(void);

/* SQLite (sqlite3.c, same link). */
typedef struct sqlite3_vfs sqlite3_vfs;
extern sqlite3_vfs *sqlite3_vfs_find(const char *name);
extern int sqlite3_vfs_register(sqlite3_vfs *vfs, int make_default);

static PyObject *boot_module;

static int fail(PyStatus status) {
    if (PyStatus_Exception(status)) fprintf(stderr, "wasmrun: init failed: %s\n",
                                            status.err_msg ? status.err_msg : "?");
    return 1;
}

/* Guest paths fixed at build time: the stdlib+runtime zip is preopened
 * read-only at /lib for the snapshot and for every run. */
__attribute__((export_name("wasmrun_init"))) int32_t wasmrun_init(void) {
    if (PyImport_AppendInittab("_wasmrun", PyInit__wasmrun) < 0) return 1;
    if (PyImport_AppendInittab("zlib", PyInit_zlib) < 0) return 1;
    if (PyImport_AppendInittab("_sqlite3", PyInit__sqlite3) < 0) return 1;
    if (PyImport_AppendInittab("_bz2", PyInit__bz2) < 0) return 1;
    if (PyImport_AppendInittab("_lzma", PyInit__lzma) < 0) return 1;

    /* UTF-8 mode (PEP 540): open() without an encoding, file names, stdio
     * and os.environ are UTF-8, whatever locale WASI reports (none: "C",
     * which would otherwise mean ASCII). It must be set before the
     * interpreter's configuration is read, so it is part of the snapshot. */
    PyPreConfig preconfig;
    PyPreConfig_InitIsolatedConfig(&preconfig);
    preconfig.utf8_mode = 1;
    PyStatus status = Py_PreInitialize(&preconfig);
    if (PyStatus_Exception(status)) return fail(status);

    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.site_import = 0;
    config.write_bytecode = 0;
    config.buffered_stdio = 0;          /* every print reaches the host log in order */
    config.install_signal_handlers = 0;
    config.pathconfig_warnings = 0;
    config.user_site_directory = 0;
    config.module_search_paths_set = 1;
    status = PyWideStringList_Append(&config.module_search_paths, L"/lib/wasmrun-guest.zip");
    if (PyStatus_Exception(status)) return fail(status);
    status = PyConfig_SetString(&config, &config.home, L"/lib");
    if (PyStatus_Exception(status)) return fail(status);
    status = PyConfig_SetString(&config, &config.program_name, L"python");
    if (PyStatus_Exception(status)) return fail(status);
    status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) return fail(status);
    if (wasmrun_install_builtin_sum() < 0) {
        PyErr_Print();
        return 1;
    }

    /* WASI has no file locks: SQLite's default VFS then fails on read-only
     * files ("access permission denied" for a database in /blobs). A run is
     * one single-threaded process with private folders, so the lock-free
     * unix VFS is the default. */
    sqlite3_vfs *nolock = sqlite3_vfs_find("unix-none");
    if (nolock != NULL) sqlite3_vfs_register(nolock, 1);

    boot_module = PyImport_ImportModule("runtime._boot");
    if (boot_module == NULL) {
        PyErr_Print();
        return 1;
    }
    PyObject *r = PyObject_CallMethod(boot_module, "init", NULL);
    if (r == NULL) {
        PyErr_Print();
        return 1;
    }
    Py_DECREF(r);
    return 0;
}

/* Serve one request. `request_len` >= 0: the request is in io_buffer;
 * -1: fetch it with host calls. Returns the response's length in io_buffer,
 * -1 if it went through the `respond` host call, -2 if there is none. */
__attribute__((export_name("wasmrun_run"))) int32_t wasmrun_run(int32_t request_len) {
    __wasilibc_reset_preopens();
    io_request_len = request_len;
    io_response_len = -2;
    if (boot_module == NULL) return -2;
    PyObject *r = PyObject_CallMethod(boot_module, "run", NULL);
    if (r == NULL) {
        PyErr_Print();
        return -2;
    }
    Py_DECREF(r);
    return io_response_len;
}

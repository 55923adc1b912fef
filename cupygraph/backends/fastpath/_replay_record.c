/* The Record: one shortcut's steady call served in C (cupygraph/backends/fastpath/_replay.c says what the extension
 * is, cupygraph/backends/fastpath/record.py what a Record holds and when Python makes a new one). */
#include "_fastpath.h"

#include <math.h> /* signbit */

#define MISS 0
#define SERVED 1
#define FAILED -1

/* Launch bank ``k`` on ``stream``: with cuGraphLaunch where the bank has one executable, else (or where
 * the driver refuses before queueing anything) through its Python launch. 0, or -1 with an exception. */
static int launch_bank(Record *self, Py_ssize_t k, unsigned long long stream) {
    void *exec = self->handles[k];
    if (self->graph_launch != NULL && exec != NULL) {
        int status;
        Py_BEGIN_ALLOW_THREADS  /* as CuPy's Graph.launch: a full launch queue blocks here */
        status = self->graph_launch(exec, (void *)(uintptr_t)stream);
        Py_END_ALLOW_THREADS
        if (status == 0) return 0;
        /* Refused before anything was queued: a thread with no current context yet (201; 3 before
         * initialisation), which the runtime behind the Python launch sets up, or a stream or handle
         * of another context (400, 1), a destroyed context (709), a stream being captured (900-908),
         * which that launch reports in CuPy's words, as the Python path does. Any other status may
         * report an earlier asynchronous error after this launch was queued: never launch again. */
        if (!(status == 201 || status == 3 || status == 400 || status == 1 || status == 709 ||
              (status >= 900 && status <= 908))) {
            PyErr_Format(PyExc_RuntimeError,
                         "cuGraphLaunch failed with CUDA error %d (this or an earlier asynchronous launch failed)",
                         status);
            return -1;
        }
    }
    PyObject *r = PyObject_CallNoArgs(PyTuple_GET_ITEM(self->launches, k));
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* counts.hits[rows] += 1 */
static int count_hit(Record *self) {
    ReplayCounts *counts = (ReplayCounts *)self->counts;
    PyObject *hits = counts->hits;
    if (hits == NULL || !PyDict_CheckExact(hits)) return 0;
    PyObject *before = PyDict_GetItemWithError(hits, self->rows);
    if (before == NULL && PyErr_Occurred()) return -1;
    long long n = before == NULL ? 0 : PyLong_AsLongLong(before);
    if (n == -1 && PyErr_Occurred()) return -1;
    PyObject *after = PyLong_FromLongLong(n + 1);
    if (after == NULL) return -1;
    int rc = PyDict_SetItem(hits, self->rows, after);
    Py_DECREF(after);
    return rc;
}

/* Drop the leaves taken so far (a call handed back or failed after some outputs were made). */
static void drop_leaves(PyObject **leaves, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++) Py_XDECREF(leaves[k]);
}

/* The result from the leaves (references stolen, all of them, whatever happens). */
static PyObject *build_result(Record *self, PyObject **leaves) {
    Py_ssize_t n = self->noutputs;
    PyObject *structure = self->structure;
    if (structure == Py_None) return leaves[0];
    PyObject *items = structure == (PyObject *)&PyTuple_Type ? PyTuple_New(n) : PyList_New(n);
    if (items == NULL) { drop_leaves(leaves, n); return NULL; }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (PyTuple_Check(items)) PyTuple_SET_ITEM(items, k, leaves[k]);
        else PyList_SET_ITEM(items, k, leaves[k]);
    }
    if (structure == (PyObject *)&PyTuple_Type || structure == (PyObject *)&PyList_Type) return items;
    PyObject *built = PyObject_CallOneArg(structure, items);  /* any other structure: rebuilt in Python */
    Py_DECREF(items);
    return built;
}

/* Result leaf ``k``: a free array of its ring, a fresh one, or the object returned as it is. Sets
 * leaves[k] (new reference) and the slot's address; MISS when its ring has no free array. */
static int take_leaf(Record *self, Py_ssize_t k, unsigned long long stream, PyObject **leaves,
                     unsigned long long *ptrs) {
    PyObject *spec = PyTuple_GET_ITEM(self->outputs, k);
    PyObject *array = NULL;
    switch (self->output_kind[k]) {
    case OUT_AS_IS:
        array = PyTuple_GET_ITEM(spec, 1);
        Py_INCREF(array);
        leaves[k] = array;
        return SERVED;
    case OUT_RING: {
        PyObject *ring = PyTuple_GET_ITEM(spec, 2);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ring) && array == NULL; i++) {
            PyObject *item = PyTuple_GET_ITEM(ring, i);
            int ok = ring_item_free(item, stream);
            if (ok < 0) return FAILED;
            if (ok) { array = PyList_GET_ITEM(item, 0); Py_INCREF(array); }
        }
        if (array == NULL) return MISS;  /* every array still held: a fresh one is the Python path's */
        break;
    }
    default:  /* OUT_FRESH: what the Python path allocates too (handed back, it goes back to CuPy's pool) */
        array = PyObject_CallFunctionObjArgs(self->allocate, PyTuple_GET_ITEM(spec, 2), PyTuple_GET_ITEM(spec, 3),
                                             NULL);
        if (array == NULL) return FAILED;
    }
    leaves[k] = array;
    return array_ptr(array, &ptrs[self->output_slot[k]]) < 0 ? FAILED : SERVED;
}

/* Under the family lock: the record still valid, the stream, the result's leaves, the bank that holds
 * the address of every slot the call gives (arguments, bound outputs); then the launch and the counts.
 * A bank of the record is one whose constants and written arguments record.py already checked: its
 * addresses are all a served call can have. Sets *out (a new reference) when SERVED; changes nothing
 * before the launch. */
static int replay_locked(Record *self, unsigned long long *ptrs, PyObject **out) {
    if (((FamilyState *)self->family)->generation != self->generation) return MISS;
    PyObject *stream = PyObject_CallNoArgs(self->current_stream);
    if (stream == NULL) return FAILED;
    PyObject *sp = PyObject_GetAttr(stream, s_ptr);
    Py_DECREF(stream);
    if (sp == NULL) return FAILED;
    unsigned long long stream_ptr = PyLong_AsUnsignedLongLong(sp);
    Py_DECREF(sp);
    if (stream_ptr == (unsigned long long)-1 && PyErr_Occurred()) return FAILED;
    if (stream_ptr != self->stream) return MISS;  /* another stream: the Python path orders it */

    PyObject *leaves[MAX_SLOTS];
    Py_ssize_t taken = 0;
    int result = SERVED;
    for (; taken < self->noutputs && result == SERVED; taken++) {
        leaves[taken] = NULL;
        result = take_leaf(self, taken, stream_ptr, leaves, ptrs);
    }
    if (result != SERVED) { drop_leaves(leaves, taken); return result; }
    Py_ssize_t n = self->nslots, found = -1;
    for (Py_ssize_t k = 0; k < self->nbanks && found < 0; k++) {
        const unsigned long long *held = self->addresses[k];
        Py_ssize_t i = 0;
        while (i < n && held[i] == ptrs[i]) i++;
        if (i == n) found = k;
    }
    if (found < 0) { drop_leaves(leaves, taken); return MISS; }  /* nodes to re-point: the Python path's */
    if (launch_bank(self, found, stream_ptr) < 0) { drop_leaves(leaves, taken); return FAILED; }
    ReplayCounts *counts = (ReplayCounts *)self->counts;
    counts->replays++;
    counts->bound_calls++;
    counts->last_bank = self->bank_index[found];
    counts->last_used = next_tick();
    if (count_hit(self) < 0) { drop_leaves(leaves, taken); return FAILED; }
    *out = build_result(self, leaves);
    return *out == NULL ? FAILED : SERVED;
}

/* Whether static value ``a`` is ``b`` as the slow path's key tells them apart (``cache/key.keyable``): the same
 * type, a float's zero of the same sign and NaN equal to NaN (complex parts alike), a tuple's items alike one by
 * one; other types by ``==``. ``Shortcuts.signature`` gives a record only values this compares exactly:
 * 1, or 0 (hand the call back). */
static int same_static(PyObject *a, PyObject *b, int depth) {
    if (Py_TYPE(a) != Py_TYPE(b)) return 0;
    if (PyFloat_CheckExact(a)) {
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return x != x ? y != y : x == y && signbit(x) == signbit(y);
    }
    if (PyComplex_CheckExact(a)) {
        Py_complex x = PyComplex_AsCComplex(a), y = PyComplex_AsCComplex(b);
        return (x.real != x.real ? y.real != y.real : x.real == y.real && signbit(x.real) == signbit(y.real)) &&
               (x.imag != x.imag ? y.imag != y.imag : x.imag == y.imag && signbit(x.imag) == signbit(y.imag));
    }
    if (PyTuple_CheckExact(a)) {
        Py_ssize_t n = PyTuple_GET_SIZE(a);
        if (depth >= 8 || n != PyTuple_GET_SIZE(b)) return 0;
        for (Py_ssize_t k = 0; k < n; k++)
            if (!same_static(PyTuple_GET_ITEM(a, k), PyTuple_GET_ITEM(b, k), depth + 1)) return 0;
        return 1;
    }
    int same = PyObject_RichCompareBool(a, b, Py_EQ);
    if (same < 0) { PyErr_Clear(); return 0; }  /* the Python path says what is wrong with it */
    return same;
}

/* Whether argument ``a`` is what position ``p`` must be (arrays: their layout and device, and their
 * address into ptrs): 1, 0 (hand the call back), or -1 with an exception. */
static int argument_matches(Record *self, Py_ssize_t p, PyObject *a, unsigned long long *ptrs) {
    PyObject *expected = PyTuple_GET_ITEM(self->expected, p);
    if (self->kinds[p] == ARG_SAME) return a == expected;
    if (self->kinds[p] == ARG_EQUAL)  /* a static value: its type and value, as the shortcut's key */
        return (PyObject *)Py_TYPE(a) == PyTuple_GET_ITEM(expected, 0) && same_static(a, PyTuple_GET_ITEM(expected, 1), 0);
    Py_ssize_t i = self->array_of[p];
    if ((PyObject *)Py_TYPE(a) != self->array_type) return 0;
    int ok = attr_equals(a, s_dtype, PyTuple_GET_ITEM(self->dtypes, i));
    if (ok == 1) ok = attr_equals(a, s_shape, PyTuple_GET_ITEM(self->shapes, i));
    if (ok == 1) ok = attr_equals(a, s_strides, PyTuple_GET_ITEM(self->strides, i));
    /* With several GPUs, the Python path's routing: an array of another device is that device
     * family's call (an address alone does not say: freed memory may come back on another device). */
    if (ok == 1 && self->device >= 0) ok = on_device(a, self->device);
    if (ok == 1 && array_ptr(a, &ptrs[i]) < 0) ok = -1;
    return ok;
}

/* record.replay(args): the result, or None when the Python path must serve this call. */
CG_INTERNAL PyObject *Record_replay(Record *self, PyObject *args) {
    if (self->shapes == NULL) goto pass;  /* never initialised, or cleared */
    if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != self->npositions) goto pass;
    unsigned long long ptrs[MAX_SLOTS];
    for (Py_ssize_t p = 0; p < self->npositions; p++) {  /* the shortcut's key, and the arrays' addresses */
        int ok = argument_matches(self, p, PyTuple_GET_ITEM(args, p), ptrs);
        if (ok < 0) return NULL;
        if (!ok) goto pass;
    }

    PyObject *r = PyObject_CallNoArgs(self->acquire);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    PyObject *out = NULL;
    int result = replay_locked(self, ptrs, &out);
    /* Release whatever happened, keeping an exception of the replay (the Python path's finally). */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    r = PyObject_CallNoArgs(self->release);
    if (r == NULL) {
        Py_XDECREF(out);
        if (type != NULL) {  /* the replay's exception becomes the release's __context__, as in ``finally`` */
            PyObject *type2, *value2, *tb2;
            PyErr_NormalizeException(&type, &value, &tb);
            if (tb != NULL) PyException_SetTraceback(value, tb);
            PyErr_Fetch(&type2, &value2, &tb2);
            PyErr_NormalizeException(&type2, &value2, &tb2);
            PyException_SetContext(value2, value); /* steals value */
            PyErr_Restore(type2, value2, tb2);
            Py_DECREF(type);
            Py_XDECREF(tb);
        }
        return NULL;
    }
    Py_DECREF(r);
    PyErr_Restore(type, value, tb);
    if (result == FAILED) return NULL;
    if (result == SERVED) { self->served++; return out; }
pass:
    self->passed++;
    Py_RETURN_NONE;
}

/* The compiled replay's helpers (cupygraph/backends/_replay.c says what the extension is): attribute
 * names, reading CuPy arrays and the binder's lists, and the ring's reference counts. */
#include "_replay.h"

PyObject *s_device_id, *s_shape, *s_dtype, *s_c_contiguous, *s_data, *s_ptr, *s_mem, *s_entry, *s_alive,
    *s_constants_token, *s_run, *s_last_stream, *s_active, *s_current, *s_ring, *s_banks, *s_fresh,
    *s_launch, *s_away, *s_replay_count, *s_last_used, *s_hits, *s_calls, *s_handle, *s__call;
PyObject *getweakrefcount;
PyObject *one;

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return -1

/* Intern the attribute names, find weakref.getweakrefcount: 0, or -1 with an exception. */
int replay_intern_names(void) {
    INTERN(s_shape, "shape"); INTERN(s_dtype, "dtype"); INTERN(s_c_contiguous, "_c_contiguous");
    INTERN(s_data, "data"); INTERN(s_ptr, "ptr"); INTERN(s_mem, "mem"); INTERN(s_entry, "entry");
    INTERN(s_alive, "alive"); INTERN(s_constants_token, "constants_token"); INTERN(s_run, "run");
    INTERN(s_last_stream, "_last_stream"); INTERN(s_active, "_active"); INTERN(s_current, "current");
    INTERN(s_ring, "ring"); INTERN(s_banks, "_banks"); INTERN(s_fresh, "fresh"); INTERN(s_launch, "launch");
    INTERN(s_away, "away"); INTERN(s_replay_count, "replay_count"); INTERN(s_last_used, "last_used");
    INTERN(s_device_id, "device_id"); INTERN(s_hits, "hits"); INTERN(s_calls, "_calls"); INTERN(s_handle, "handle");
    INTERN(s__call, "_call");
    if ((one = PyLong_FromLong(1)) == NULL) return -1;
    PyObject *weakref = PyImport_ImportModule("weakref");
    if (weakref == NULL) return -1;
    getweakrefcount = PyObject_GetAttrString(weakref, "getweakrefcount");
    Py_DECREF(weakref);
    return getweakrefcount == NULL ? -1 : 0;
}

/* The four counts cupy_fast.references returns, for ``item`` = [array, stream, counts]: references
 * to the array, its MemoryPointer and its memory, and weak references to the array. Measured with
 * the same temporaries whichever caller asks, so counts taken when only the ring held the array
 * compare equal exactly when nobody else holds it. Returns -1 with an exception set on error. */
CG_INTERNAL int measure(PyObject *item, Py_ssize_t counts[4]) {
    if (!PyList_CheckExact(item) || PyList_GET_SIZE(item) != 3) {
        PyErr_SetString(PyExc_TypeError, "references: expected [array, stream, counts]");
        return -1;
    }
    PyObject *array = PyList_GET_ITEM(item, 0);
    PyObject *data = PyObject_GetAttr(array, s_data);
    if (data == NULL) return -1;
    PyObject *mem = PyObject_GetAttr(data, s_mem);
    if (mem == NULL) { Py_DECREF(data); return -1; }
    counts[0] = Py_REFCNT(array);
    counts[1] = Py_REFCNT(data);
    counts[2] = Py_REFCNT(mem);
    Py_DECREF(mem);
    Py_DECREF(data);
    PyObject *weak = PyObject_CallOneArg(getweakrefcount, array);
    if (weak == NULL) return -1;
    counts[3] = PyLong_AsSsize_t(weak);
    Py_DECREF(weak);
    return (counts[3] == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Whether ``item``'s array is free again: same stream, counts equal to those taken at its making. */
CG_INTERNAL int ring_item_free(PyObject *item, PyObject *stream_ptr) {
    if (!PyList_CheckExact(item) || PyList_GET_SIZE(item) != 3) return 0;
    int same = PyObject_RichCompareBool(PyList_GET_ITEM(item, 1), stream_ptr, Py_EQ);
    if (same != 1) return same;
    if (PyList_GET_SIZE(item) != 3) return 0;  /* (re-read: the compare may have run Python code) */
    PyObject *then = PyList_GET_ITEM(item, 2);
    if (!PyTuple_CheckExact(then) || PyTuple_GET_SIZE(then) != 4) return 0;
    Py_INCREF(then);  /* held across measure(), which may run Python code */
    Py_ssize_t now[4];
    int result = 1;
    if (measure(item, now) < 0) {
        result = -1;
    } else {
        for (int i = 0; i < 4 && result == 1; i++) {
            Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(then, i));
            if (v == -1 && PyErr_Occurred()) result = -1;
            else if (v != now[i]) result = 0;
        }
    }
    Py_DECREF(then);
    return result;
}

/* Whether ``current`` (a bank's addresses) is exactly [inputs..., output]. */
CG_INTERNAL int holds(PyObject *current, PyObject *const *in_ptrs, Py_ssize_t n, PyObject *out_ptr) {
    for (Py_ssize_t i = 0; i <= n; i++) {
        /* (the size re-read each time: a compare may run Python code) */
        if (!PyList_CheckExact(current) || PyList_GET_SIZE(current) != n + 1) return 0;
        PyObject *held = PyList_GET_ITEM(current, i);
        Py_INCREF(held);
        int same = PyObject_RichCompareBool(held, i < n ? in_ptrs[i] : out_ptr, Py_EQ);
        Py_DECREF(held);
        if (same != 1) return same;
    }
    return 1;
}

/* obj.name is ``expected`` (identity); -1 on error. */
CG_INTERNAL int attr_is(PyObject *obj, PyObject *name, PyObject *expected) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int same = v == expected;
    Py_DECREF(v);
    return same;
}

CG_INTERNAL int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int truth = PyObject_IsTrue(v);
    Py_DECREF(v);
    return truth;
}

CG_INTERNAL int attr_increment(PyObject *obj, PyObject *name) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    PyObject *w = PyNumber_Add(v, one);
    Py_DECREF(v);
    if (w == NULL) return -1;
    int rc = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    return rc;
}

CG_INTERNAL PyObject *attr_ptr(PyObject *array) {  /* array.data.ptr */
    PyObject *data = PyObject_GetAttr(array, s_data);
    if (data == NULL) return NULL;
    PyObject *ptr = PyObject_GetAttr(data, s_ptr);
    Py_DECREF(data);
    return ptr;
}

/* Whether ``array`` lives on ``device`` (array.data.device_id); -1 on error. */
CG_INTERNAL int on_device(PyObject *array, long device) {
    PyObject *data = PyObject_GetAttr(array, s_data);
    if (data == NULL) return -1;
    PyObject *id = PyObject_GetAttr(data, s_device_id);
    Py_DECREF(data);
    if (id == NULL) return -1;
    long value = PyLong_AsLong(id);
    Py_DECREF(id);
    if (value == -1 && PyErr_Occurred()) return -1;
    return value == device;
}

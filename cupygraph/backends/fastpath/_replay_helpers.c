/* The compiled replay's helpers (cupygraph/backends/fastpath/_replay.c says what the extension is): reading
 * CuPy arrays' public attributes, and the ring's reference counts. */
#include "_fastpath.h"

PyObject *s_shape, *s_dtype, *s_strides, *s_data, *s_ptr, *s_mem, *s_device_id;
PyObject *getweakrefcount;

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return -1

/* Intern the attribute names, find weakref.getweakrefcount: 0, or -1 with an exception. */
int replay_intern_names(void) {
    INTERN(s_shape, "shape"); INTERN(s_dtype, "dtype"); INTERN(s_strides, "strides"); INTERN(s_data, "data");
    INTERN(s_ptr, "ptr"); INTERN(s_mem, "mem"); INTERN(s_device_id, "device_id");
    PyObject *weakref = PyImport_ImportModule("weakref");
    if (weakref == NULL) return -1;
    getweakrefcount = PyObject_GetAttrString(weakref, "getweakrefcount");
    Py_DECREF(weakref);
    return getweakrefcount == NULL ? -1 : 0;
}

/* The four counts record.references returns, for ``item`` = [array, stream ptr, counts]: references
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

/* Whether ``item``'s array is free again: made on ``stream``, counts equal to those taken at its making. */
CG_INTERNAL int ring_item_free(PyObject *item, unsigned long long stream) {
    if (!PyList_CheckExact(item) || PyList_GET_SIZE(item) != 3) return 0;
    PyObject *made_on = PyList_GET_ITEM(item, 1);
    if (!PyLong_Check(made_on)) return 0;
    unsigned long long on = PyLong_AsUnsignedLongLong(made_on);
    if (on == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (on != stream) return 0;
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

/* array.data.ptr into *ptr: 0, or -1 with an exception. */
CG_INTERNAL int array_ptr(PyObject *array, unsigned long long *ptr) {
    PyObject *data = PyObject_GetAttr(array, s_data);
    if (data == NULL) return -1;
    PyObject *value = PyObject_GetAttr(data, s_ptr);
    Py_DECREF(data);
    if (value == NULL) return -1;
    *ptr = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return (*ptr == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
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

/* obj.name == expected (identity first); -1 on error. */
CG_INTERNAL int attr_equals(PyObject *obj, PyObject *name, PyObject *expected) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) return -1;
    int same = v == expected ? 1 : PyObject_RichCompareBool(v, expected, Py_EQ);
    Py_DECREF(v);
    return same;
}

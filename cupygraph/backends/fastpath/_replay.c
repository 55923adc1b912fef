/* The replay hot path of one zero-copy graph, compiled: cupygraph/backends/fastpath/record.py says when it
 * is used and what it must equal.
 *
 * A jitted function's class derives from FastFunction: a call is offered first to the Record its
 * shortcuts published (one shortcut's steady call: up to MAX_ARGUMENTS array arguments of their captured
 * layout bound to the caller's arrays, constants and static values as the shortcut's key has them, each
 * output from its ring, fresh or as it is, at addresses an executable already holds), which serves it
 * exactly as the Python path would, or hands it back (None) before
 * changing anything; then to the Python path (``miss``). Python builds each Record once and never
 * changes it; what both paths update lives in this module's own ReplayCounts and FamilyState. */
#include "_fastpath.h"
#include <structmember.h>

static PyObject *tick(PyObject *module, PyObject *unused) { return PyLong_FromLongLong(next_tick()); }

static PyObject *references(PyObject *module, PyObject *item) {
    Py_ssize_t c[4];
    if (measure(item, c) < 0) return NULL;
    return Py_BuildValue("(nnnn)", c[0], c[1], c[2], c[3]);
}

/* -- FastFunction ------------------------------------------------------------------------------- */

/* The base of GraphedFunction: a call is offered to its record first (no Python frame at all when it
 * serves it), else handed to the Python path, ``miss``. */
typedef struct {
    PyObject_HEAD
    PyObject *record; /* a Record, or NULL */
    PyObject *miss;   /* the Python path: called with the call's arguments */
    PyObject *dict;
    PyObject *weaklist;
} FastFunction;

static PyObject *FastFunction_call(FastFunction *self, PyObject *args, PyObject *kwargs) {
    PyObject *record = self->record;
    if (record != NULL && (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0)) {
        /* Held for the call: another thread may publish a new one while this one waits for the lock. */
        Py_INCREF(record);
        PyObject *out = Record_replay((Record *)record, args);
        Py_DECREF(record);
        if (out != Py_None) return out; /* the result, or NULL with its exception */
        Py_DECREF(out);
    }
    if (self->miss == NULL) {
        PyErr_SetString(PyExc_TypeError, "FastFunction: no Python path (miss) was given");
        return NULL;
    }
    return PyObject_Call(self->miss, args, kwargs);
}

static PyObject *FastFunction_get_record(FastFunction *self, void *closure) {
    PyObject *r = self->record ? self->record : Py_None;
    Py_INCREF(r);
    return r;
}

static int FastFunction_set_record(FastFunction *self, PyObject *value, void *closure) {
    if (value != NULL && value != Py_None && !PyObject_TypeCheck(value, &RecordType)) {
        PyErr_SetString(PyExc_TypeError, "record must be a Record or None");
        return -1;
    }
    PyObject *old = self->record;
    self->record = (value == NULL || value == Py_None) ? NULL : value;
    Py_XINCREF(self->record);
    Py_XDECREF(old);
    return 0;
}

static PyObject *FastFunction_get_miss(FastFunction *self, void *closure) {
    PyObject *m = self->miss ? self->miss : Py_None;
    Py_INCREF(m);
    return m;
}

static int FastFunction_set_miss(FastFunction *self, PyObject *value, void *closure) {
    if (value != NULL && value != Py_None && !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "miss must be callable");
        return -1;
    }
    PyObject *old = self->miss;
    self->miss = (value == NULL || value == Py_None) ? NULL : value;
    Py_XINCREF(self->miss);
    Py_XDECREF(old);
    return 0;
}

static int FastFunction_traverse(FastFunction *self, visitproc visit, void *arg) {
    Py_VISIT(self->record);
    Py_VISIT(self->miss);
    Py_VISIT(self->dict);
    return 0;
}

static int FastFunction_clear(FastFunction *self) {
    Py_CLEAR(self->record);
    Py_CLEAR(self->miss);
    Py_CLEAR(self->dict);
    return 0;
}

static void FastFunction_dealloc(FastFunction *self) {
    /* (A subclass instance's type reference is dropped by the subclass's own dealloc.) */
    PyObject_GC_UnTrack(self);
    if (self->weaklist != NULL) PyObject_ClearWeakRefs((PyObject *)self);
    FastFunction_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef FastFunction_getset[] = {
    {"record", (getter)FastFunction_get_record, (setter)FastFunction_set_record,
     "the Record tried first (cupygraph/backends/fastpath/record.py), or None", NULL},
    {"miss", (getter)FastFunction_get_miss, (setter)FastFunction_set_miss,
     "the Python path, called with every call the record does not serve", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FastFunctionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupygraph.backends.fastpath._replay.FastFunction",
    .tp_basicsize = sizeof(FastFunction),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A callable that offers each call to its record first, else to its Python path (miss).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)FastFunction_dealloc,
    .tp_traverse = (traverseproc)FastFunction_traverse,
    .tp_clear = (inquiry)FastFunction_clear,
    .tp_call = (ternaryfunc)FastFunction_call,
    .tp_getset = FastFunction_getset,
    .tp_dictoffset = offsetof(FastFunction, dict),
    .tp_weaklistoffset = offsetof(FastFunction, weaklist),
};

static PyMethodDef module_methods[] = {
    {"references", (PyCFunction)references, METH_O,
     "references(item) -> the four counts that say whether a ring's array is free again"},
    {"tick", (PyCFunction)tick, METH_NOARGS, "tick() -> the next value of the use clock"},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay", "The compiled replay hot path (cupygraph/backends/fastpath/record.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__replay(void) {
    if (replay_intern_names() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddType(m, &RecordType) < 0 || PyModule_AddType(m, &FastFunctionType) < 0 ||
        PyModule_AddType(m, &ReplayCountsType) < 0 || PyModule_AddType(m, &FamilyStateType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_ARGUMENTS", MAX_ARGUMENTS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BANKS", MAX_BANKS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_POSITIONS", MAX_POSITIONS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_SLOTS", MAX_SLOTS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

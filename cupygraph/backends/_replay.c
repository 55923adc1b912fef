/* The replay hot path of one zero-copy graph, compiled: cupygraph/backends/cupy_fast.py says when it
 * is used and what it must equal.
 *
 * A Replayer serves the calls of one plan (up to MAX_ARGUMENTS array arguments of their captured
 * shapes and dtypes, bound to the caller's arrays, and one fresh output taken again from its ring) exactly as the Python
 * path would (GraphedFunction.__call__ -> CUDAGraphEntry._run_bound_plain -> CupyBinder.bind ->
 * CUDAGraphEntry.launch), and hands any other call back (returns None) before it has changed
 * anything, so the Python path serves it instead: a first call, another shape, a copied argument,
 * an output still held by the caller, another stream, a retired plan, a node to re-point.
 *
 * It reads and writes the Python objects' attributes by name, so both paths keep one state: the
 * statistics, the rings and the banks are the same whichever path served a call.
 */
#include "_replay.h"

static PyObject *references(PyObject *module, PyObject *item) {
    Py_ssize_t c[4];
    if (measure(item, c) < 0) return NULL;
    return Py_BuildValue("(nnnn)", c[0], c[1], c[2], c[3]);
}

/* The base of GraphedFunction: a call is offered to its compiled replay first (no Python frame at
 * all when it serves it), else handed to the Python path, ``_call``. */
typedef struct {
    PyObject_HEAD
    PyObject *replayer; /* a Replayer, or NULL */
    PyObject *dict;
    PyObject *weaklist;
} FastFunction;

static PyObject *FastFunction_call(FastFunction *self, PyObject *args, PyObject *kwargs) {
    PyObject *replayer = self->replayer;
    if (replayer != NULL && (kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0)) {
        /* Held for the call: another thread may publish a new one while this one waits for the lock. */
        Py_INCREF(replayer);
        PyObject *out = Replayer_replay((Replayer *)replayer, args);
        Py_DECREF(replayer);
        if (out != Py_None) return out; /* the result, or NULL with its exception */
        Py_DECREF(out);
    }
    PyObject *python_path = PyObject_GetAttr((PyObject *)self, s__call);
    if (python_path == NULL) return NULL;
    PyObject *out = PyObject_Call(python_path, args, kwargs);
    Py_DECREF(python_path);
    return out;
}

static PyObject *FastFunction_get_replayer(FastFunction *self, void *closure) {
    PyObject *r = self->replayer ? self->replayer : Py_None;
    Py_INCREF(r);
    return r;
}

static int FastFunction_set_replayer(FastFunction *self, PyObject *value, void *closure) {
    if (value != NULL && value != Py_None && !PyObject_TypeCheck(value, &ReplayerType)) {
        PyErr_SetString(PyExc_TypeError, "_replayer must be a Replayer or None");
        return -1;
    }
    PyObject *old = self->replayer;
    self->replayer = (value == NULL || value == Py_None) ? NULL : value;
    Py_XINCREF(self->replayer);
    Py_XDECREF(old);
    return 0;
}

static int FastFunction_traverse(FastFunction *self, visitproc visit, void *arg) {
    Py_VISIT(self->replayer);
    Py_VISIT(self->dict);
    return 0;
}

static int FastFunction_clear(FastFunction *self) {
    Py_CLEAR(self->replayer);
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
    {"_replayer", (getter)FastFunction_get_replayer, (setter)FastFunction_set_replayer,
     "the compiled replay tried first (cupygraph/backends/cupy_fast.py), or None", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FastFunctionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupygraph.backends._replay.FastFunction",
    .tp_basicsize = sizeof(FastFunction),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A callable that offers each call to its compiled replay first, else to self._call.",
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
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_replay", "The compiled replay hot path (cupygraph/backends/cupy_fast.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__replay(void) {
    if (replay_intern_names() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddType(m, &ReplayerType) < 0 || PyModule_AddType(m, &FastFunctionType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_ARGUMENTS", MAX_ARGUMENTS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

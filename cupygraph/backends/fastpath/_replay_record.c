/* The Record: one shortcut's steady call served in C (cupygraph/backends/fastpath/_replay.c says what the extension
 * is, cupygraph/backends/fastpath/record.py what a Record holds and when Python makes a new one). */
#include "_replay.h"

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

/* Under the family lock: the record still valid, the stream, a free output, the bank that holds these
 * addresses; then the launch and the counts. Sets *out (a new reference) when SERVED; changes nothing
 * before the launch. */
static int replay_locked(Record *self, const unsigned long long *ptrs, PyObject **out) {
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

    PyObject *array = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->ring) && array == NULL; i++) {
        PyObject *item = PyTuple_GET_ITEM(self->ring, i);
        int ok = ring_item_free(item, stream_ptr);
        if (ok < 0) return FAILED;
        if (ok) { array = PyList_GET_ITEM(item, 0); Py_INCREF(array); }
    }
    if (array == NULL) return MISS;  /* every output still held: a fresh one is the Python path's */
    unsigned long long out_ptr;
    if (array_ptr(array, &out_ptr) < 0) { Py_DECREF(array); return FAILED; }
    Py_ssize_t n = self->nargs, found = -1;
    for (Py_ssize_t k = 0; k < self->nbanks && found < 0; k++) {
        const unsigned long long *held = self->addresses[k];
        Py_ssize_t i = 0;
        while (i < n && held[i] == ptrs[i]) i++;
        if (i == n && held[n] == out_ptr) found = k;
    }
    if (found < 0) { Py_DECREF(array); return MISS; }  /* nodes to re-point: the Python path's */
    if (launch_bank(self, found, stream_ptr) < 0) { Py_DECREF(array); return FAILED; }
    ReplayCounts *counts = (ReplayCounts *)self->counts;
    counts->replays++;
    counts->bound_calls++;
    counts->last_bank = found;
    counts->last_used = next_tick();
    if (count_hit(self) < 0) { Py_DECREF(array); return FAILED; }
    *out = array;
    return SERVED;
}

/* record.replay(args): the result, or None when the Python path must serve this call. */
CG_INTERNAL PyObject *Record_replay(Record *self, PyObject *args) {
    if (self->shapes == NULL) goto pass;  /* never initialised, or cleared */
    Py_ssize_t n = self->nargs;
    if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != n) goto pass;
    unsigned long long ptrs[MAX_ARGUMENTS];
    for (Py_ssize_t i = 0; i < n; i++) {  /* the shortcut's key: exact array type, dtype, shape and strides */
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if ((PyObject *)Py_TYPE(a) != self->array_type) goto pass;
        int ok = attr_equals(a, s_dtype, PyTuple_GET_ITEM(self->dtypes, i));
        if (ok == 1) ok = attr_equals(a, s_shape, PyTuple_GET_ITEM(self->shapes, i));
        if (ok == 1) ok = attr_equals(a, s_strides, PyTuple_GET_ITEM(self->strides, i));
        /* With several GPUs, the Python path's routing: an array of another device is that device
         * family's call (an address alone does not say: freed memory may come back on another device). */
        if (ok == 1 && self->device >= 0) ok = on_device(a, self->device);
        if (ok < 0) return NULL;
        if (!ok) goto pass;
        if (array_ptr(a, &ptrs[i]) < 0) return NULL;
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

static int Record_traverse(Record *self, visitproc visit, void *arg) {
#define VISIT_FIELD(field) Py_VISIT(self->field);
    RECORD_OBJECTS(VISIT_FIELD)
#undef VISIT_FIELD
    return 0;
}

static int Record_clear(Record *self) {
#define CLEAR_FIELD(field) Py_CLEAR(self->field);
    RECORD_OBJECTS(CLEAR_FIELD)
#undef CLEAR_FIELD
    return 0;
}

static void Record_dealloc(Record *self) {
    PyObject_GC_UnTrack(self);
    Record_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int tuple_of(PyObject *value, Py_ssize_t size, const char *name) {
    if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != size) {
        PyErr_Format(PyExc_TypeError, "Record: %s must be a tuple of %zd items", name, size);
        return 0;
    }
    return 1;
}

/* Record(*, array_type, shapes, strides, dtypes, device, stream, banks, ring, rows, counts, family,
 *        generation, lock, current_stream, graph_launch): every field checked here, never changed after. */
static int Record_init(Record *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"array_type", "shapes", "strides", "dtypes", "device", "stream", "banks", "ring", "rows",
                            "counts", "family", "generation", "lock", "current_stream", "graph_launch", NULL};
    PyObject *array_type = NULL, *shapes = NULL, *strides = NULL, *dtypes = NULL, *banks = NULL, *ring = NULL,
             *rows = NULL, *counts = NULL, *family = NULL, *lock = NULL, *current_stream = NULL;
    long device = -1;
    unsigned long long stream = 0;
    long long generation = 0;
    Py_ssize_t graph_launch = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOOlKOOOOOLOOn", names, &array_type, &shapes, &strides, &dtypes,
                                     &device, &stream, &banks, &ring, &rows, &counts, &family, &generation, &lock,
                                     &current_stream, &graph_launch))
        return -1;
    PyObject *given[] = {array_type, shapes, strides, dtypes, banks, ring, rows, counts, family, lock, current_stream};
    const char *given_names[] = {"array_type", "shapes", "strides", "dtypes", "banks", "ring", "rows", "counts",
                                 "family", "lock", "current_stream"};
    for (int i = 0; i < 11; i++) {
        if (given[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "Record() needs the keyword argument %s", given_names[i]);
            return -1;
        }
    }
    if (self->shapes != NULL) {
        PyErr_SetString(PyExc_TypeError, "Record: already initialised (records never change; make a new one)");
        return -1;
    }
    if (!PyType_Check(array_type) || !PyTuple_CheckExact(shapes) || PyTuple_GET_SIZE(shapes) < 1 ||
        PyTuple_GET_SIZE(shapes) > MAX_ARGUMENTS) {
        PyErr_Format(PyExc_TypeError, "Record: array_type must be a type and shapes a tuple of 1 to %d shapes",
                     MAX_ARGUMENTS);
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(shapes);
    if (!tuple_of(strides, n, "strides") || !tuple_of(dtypes, n, "dtypes")) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyTuple_CheckExact(PyTuple_GET_ITEM(shapes, i)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(strides, i))) {
            PyErr_SetString(PyExc_TypeError, "Record: each of shapes and strides must be a tuple");
            return -1;
        }
    }
    if (!PyTuple_CheckExact(banks) || PyTuple_GET_SIZE(banks) < 1 || PyTuple_GET_SIZE(banks) > MAX_BANKS) {
        PyErr_Format(PyExc_TypeError, "Record: banks must be a tuple of 1 to %d (handle, addresses, launch)",
                     MAX_BANKS);
        return -1;
    }
    if (!PyTuple_CheckExact(ring) || !PyLong_Check(rows) || !PyObject_TypeCheck(counts, &ReplayCountsType) ||
        !PyObject_TypeCheck(family, &FamilyStateType)) {
        PyErr_SetString(PyExc_TypeError, "Record: ring must be a tuple, rows an int, counts a ReplayCounts and "
                                         "family a FamilyState");
        return -1;
    }
    Py_ssize_t nbanks = PyTuple_GET_SIZE(banks);
    PyObject *launches = PyTuple_New(nbanks);
    if (launches == NULL) return -1;
    for (Py_ssize_t k = 0; k < nbanks; k++) {
        PyObject *bank = PyTuple_GET_ITEM(banks, k);
        if (!PyTuple_CheckExact(bank) || PyTuple_GET_SIZE(bank) != 3 || !PyLong_Check(PyTuple_GET_ITEM(bank, 0)) ||
            !tuple_of(PyTuple_GET_ITEM(bank, 1), n + 1, "each bank's addresses (arguments, then the output)") ||
            !PyCallable_Check(PyTuple_GET_ITEM(bank, 2))) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "Record: each bank is (handle, addresses, launch)");
            Py_DECREF(launches);
            return -1;
        }
        self->handles[k] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(bank, 0));
        for (Py_ssize_t i = 0; i <= n; i++) {
            self->addresses[k][i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(bank, 1), i));
        }
        if (PyErr_Occurred()) { Py_DECREF(launches); return -1; }
        Py_INCREF(PyTuple_GET_ITEM(bank, 2));
        PyTuple_SET_ITEM(launches, k, PyTuple_GET_ITEM(bank, 2));
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (release == NULL) { Py_XDECREF(acquire); Py_DECREF(launches); return -1; }
    Record_clear(self);
    self->nargs = n;
    self->nbanks = nbanks;
    self->device = device;
    self->stream = stream;
    self->generation = generation;
    self->graph_launch = (graph_launch_fn)(intptr_t)graph_launch;
#define KEEP(field) Py_INCREF(field); self->field = field;
    KEEP(array_type) KEEP(shapes) KEEP(strides) KEEP(dtypes) KEEP(ring) KEEP(rows) KEEP(counts) KEEP(family)
    KEEP(current_stream)
#undef KEEP
    self->launches = launches;
    self->acquire = acquire;
    self->release = release;
    return 0;
}

static PyObject *Record_get_served(Record *self, void *closure) { return PyLong_FromSsize_t(self->served); }
static PyObject *Record_get_passed(Record *self, void *closure) { return PyLong_FromSsize_t(self->passed); }
static PyObject *Record_get_generation(Record *self, void *closure) { return PyLong_FromLongLong(self->generation); }
static PyObject *Record_get_counts(Record *self, void *closure) {
    PyObject *c = self->counts ? self->counts : Py_None;
    Py_INCREF(c);
    return c;
}

static PyGetSetDef Record_getset[] = {
    {"served", (getter)Record_get_served, NULL, "calls this record served", NULL},
    {"passed", (getter)Record_get_passed, NULL, "calls it handed back to the Python path", NULL},
    {"generation", (getter)Record_get_generation, NULL, "the family generation it describes", NULL},
    {"counts", (getter)Record_get_counts, NULL, "the entry's ReplayCounts it writes", NULL},
    {NULL},
};

static PyMethodDef Record_methods[] = {
    {"replay", (PyCFunction)Record_replay, METH_O,
     "replay(args): the call's result, or None when the Python path must serve it"},
    {NULL},
};

PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupygraph.backends.fastpath._replay.Record",
    .tp_basicsize = sizeof(Record),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "What the compiled replay of one shortcut reads (cupygraph/backends/fastpath/record.py); never changes.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Record_init,
    .tp_dealloc = (destructor)Record_dealloc,
    .tp_traverse = (traverseproc)Record_traverse,
    .tp_clear = (inquiry)Record_clear,
    .tp_getset = Record_getset,
    .tp_methods = Record_methods,
};

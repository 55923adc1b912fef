/* The Record's construction, checks and type (cupygraph/backends/fastpath/_replay_record.c replays it;
 * cupygraph/backends/fastpath/record.py says what each field holds and builds it). */
#include "_fastpath.h"

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

static int bad(const char *message) {
    PyErr_Format(PyExc_TypeError, "Record: %s", message);
    return -1;
}

static int tuple_of(PyObject *value, Py_ssize_t size, const char *name) {
    if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) != size) {
        PyErr_Format(PyExc_TypeError, "Record: %s must be a tuple of %zd items", name, size);
        return 0;
    }
    return 1;
}

/* A slot index in [0, nslots), marked in ``covered`` (each slot is an array's or a bound output's, exactly
 * once): 0, or -1 with an exception. */
static int cover(PyObject *value, Py_ssize_t nslots, char *covered, Py_ssize_t *slot) {
    Py_ssize_t s = PyLong_Check(value) ? PyLong_AsSsize_t(value) : -1;
    if (s == -1 && PyErr_Occurred()) return -1;
    if (s < 0 || s >= nslots || covered[s]) return bad("each slot (0 to the banks' address count) is given exactly once");
    covered[s] = 1;
    *slot = s;
    return 0;
}

static int all_covered(const char *covered, Py_ssize_t nslots) {
    for (Py_ssize_t s = 0; s < nslots; s++)
        if (!covered[s]) return bad("every slot is an array's or a bound output's");
    return 0;
}

/* arguments: per call position, an int (that array's index), ("same", object) or ("equal", type, value). */
static int parse_arguments(Record *self, PyObject *arguments, Py_ssize_t narrays, char *covered) {
    Py_ssize_t n = PyTuple_GET_SIZE(arguments);
    PyObject *expected = PyTuple_New(n);
    if (expected == NULL) return -1;
    char seen[MAX_ARGUMENTS] = {0};
    for (Py_ssize_t p = 0; p < n; p++) {
        PyObject *a = PyTuple_GET_ITEM(arguments, p), *keep = Py_None;
        if (PyLong_Check(a)) {
            Py_ssize_t i = PyLong_AsSsize_t(a);
            if (i < 0 || i >= narrays || seen[i]) { Py_DECREF(expected); return bad("each array index given once"); }
            seen[i] = 1;
            covered[i] = 1;  /* an array's slot is its index */
            self->kinds[p] = ARG_ARRAY;
            self->array_of[p] = i;
        } else if (PyTuple_CheckExact(a) && PyTuple_GET_SIZE(a) == 2 &&
                   PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a, 0), "same") == 0) {
            self->kinds[p] = ARG_SAME;
            keep = PyTuple_GET_ITEM(a, 1);
        } else if (PyTuple_CheckExact(a) && PyTuple_GET_SIZE(a) == 3 && PyType_Check(PyTuple_GET_ITEM(a, 1)) &&
                   PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(a, 0), "equal") == 0) {
            self->kinds[p] = ARG_EQUAL;
            keep = PyTuple_GetSlice(a, 1, 3);
            if (keep == NULL) { Py_DECREF(expected); return -1; }
            PyTuple_SET_ITEM(expected, p, keep);
            continue;
        } else {
            Py_DECREF(expected);
            return bad("each argument is an array index, ('same', object) or ('equal', type, value)");
        }
        Py_INCREF(keep);
        PyTuple_SET_ITEM(expected, p, keep);
    }
    for (Py_ssize_t i = 0; i < narrays; i++)
        if (!seen[i]) { Py_DECREF(expected); return bad("every array is some argument's"); }
    self->expected = expected;
    return 0;
}

/* outputs: per result leaf, ("ring", slot, (item, ...)), ("fresh", slot, shape, dtype) or ("as_is", object). */
static int parse_outputs(Record *self, PyObject *outputs, Py_ssize_t nslots, char *covered) {
    Py_ssize_t n = PyTuple_GET_SIZE(outputs);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *o = PyTuple_GET_ITEM(outputs, k);
        Py_ssize_t size = PyTuple_CheckExact(o) ? PyTuple_GET_SIZE(o) : 0;
        PyObject *kind = size ? PyTuple_GET_ITEM(o, 0) : Py_None;
        if (!PyUnicode_Check(kind)) return bad("each output is ('ring', ...), ('fresh', ...) or ('as_is', ...)");
        if (size == 2 && PyUnicode_CompareWithASCIIString(kind, "as_is") == 0) {
            self->output_kind[k] = OUT_AS_IS;
            continue;
        }
        if (size == 3 && PyUnicode_CompareWithASCIIString(kind, "ring") == 0 &&
            PyTuple_CheckExact(PyTuple_GET_ITEM(o, 2))) {
            self->output_kind[k] = OUT_RING;
        } else if (size == 4 && PyUnicode_CompareWithASCIIString(kind, "fresh") == 0) {
            self->output_kind[k] = OUT_FRESH;
        } else {
            return bad("each output is ('ring', slot, ring), ('fresh', slot, shape, dtype) or ('as_is', object)");
        }
        if (cover(PyTuple_GET_ITEM(o, 1), nslots, covered, &self->output_slot[k]) < 0) return -1;
    }
    return 0;
}

/* banks: per bank (index, handle, addresses of every slot, launch), the index its place among the recording's. */
static int parse_banks(Record *self, PyObject *banks, Py_ssize_t nslots) {
    Py_ssize_t nbanks = PyTuple_GET_SIZE(banks);
    PyObject *launches = PyTuple_New(nbanks);
    if (launches == NULL) return -1;
    for (Py_ssize_t k = 0; k < nbanks; k++) {
        PyObject *bank = PyTuple_GET_ITEM(banks, k);
        if (!PyTuple_CheckExact(bank) || PyTuple_GET_SIZE(bank) != 4 || !PyLong_Check(PyTuple_GET_ITEM(bank, 0)) ||
            !PyLong_Check(PyTuple_GET_ITEM(bank, 1)) ||
            !tuple_of(PyTuple_GET_ITEM(bank, 2), nslots, "each bank's addresses (one per slot)") ||
            !PyCallable_Check(PyTuple_GET_ITEM(bank, 3))) {
            if (!PyErr_Occurred()) bad("each bank is (index, handle, addresses, launch)");
            Py_DECREF(launches);
            return -1;
        }
        self->bank_index[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(bank, 0));
        if (self->bank_index[k] < 0) {
            if (!PyErr_Occurred()) bad("each bank's index is 0 or more");
            Py_DECREF(launches);
            return -1;
        }
        self->handles[k] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(bank, 1));
        for (Py_ssize_t i = 0; i < nslots; i++)
            self->addresses[k][i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(bank, 2), i));
        if (PyErr_Occurred()) { Py_DECREF(launches); return -1; }
        Py_INCREF(PyTuple_GET_ITEM(bank, 3));
        PyTuple_SET_ITEM(launches, k, PyTuple_GET_ITEM(bank, 3));
    }
    self->launches = launches;
    self->nbanks = nbanks;
    return 0;
}

/* Record(*, array_type, arguments, shapes, strides, dtypes, outputs, structure, allocate, device, stream, banks,
 *        rows, counts, family, generation, lock, current_stream, graph_launch): every field checked here, never
 * changed after. A bank's addresses are those of the slots a call gives, arrays then bound outputs: which banks
 * may serve (constants, written arguments) record.py decided. */
static int Record_init(Record *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"array_type", "arguments", "shapes", "strides", "dtypes", "outputs", "structure",
                            "allocate", "device", "stream", "banks", "rows", "counts", "family", "generation", "lock",
                            "current_stream", "graph_launch", NULL};
    PyObject *array_type = NULL, *arguments = NULL, *shapes = NULL, *strides = NULL, *dtypes = NULL, *outputs = NULL,
             *structure = NULL, *allocate = NULL, *banks = NULL, *rows = NULL, *counts = NULL, *family = NULL,
             *lock = NULL, *current_stream = NULL;
    long device = -1;
    unsigned long long stream = 0;
    long long generation = 0;
    Py_ssize_t graph_launch = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOOOOOOlKOOOOLOOn", names, &array_type, &arguments, &shapes,
                                     &strides, &dtypes, &outputs, &structure, &allocate, &device, &stream, &banks,
                                     &rows, &counts, &family, &generation, &lock, &current_stream, &graph_launch))
        return -1;
    PyObject *given[] = {array_type, arguments, shapes, strides, dtypes, outputs, structure, allocate, banks, rows,
                         counts, family, lock, current_stream};
    const char *given_names[] = {"array_type", "arguments", "shapes", "strides", "dtypes", "outputs", "structure",
                                 "allocate", "banks", "rows", "counts", "family", "lock", "current_stream"};
    for (int i = 0; i < (int)(sizeof(given) / sizeof(given[0])); i++) {
        if (given[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "Record() needs the keyword argument %s", given_names[i]);
            return -1;
        }
    }
    if (self->shapes != NULL) return bad("already initialised (records never change; make a new one)");
    if (!PyType_Check(array_type) || !PyTuple_CheckExact(shapes) || PyTuple_GET_SIZE(shapes) < 1 ||
        PyTuple_GET_SIZE(shapes) > MAX_ARGUMENTS) {
        PyErr_Format(PyExc_TypeError, "Record: array_type must be a type and shapes a tuple of 1 to %d shapes",
                     MAX_ARGUMENTS);
        return -1;
    }
    Py_ssize_t narrays = PyTuple_GET_SIZE(shapes);
    if (!tuple_of(strides, narrays, "strides") || !tuple_of(dtypes, narrays, "dtypes")) return -1;
    for (Py_ssize_t i = 0; i < narrays; i++) {
        if (!PyTuple_CheckExact(PyTuple_GET_ITEM(shapes, i)) || !PyTuple_CheckExact(PyTuple_GET_ITEM(strides, i)))
            return bad("each of shapes and strides must be a tuple");
    }
    if (!PyTuple_CheckExact(arguments) || PyTuple_GET_SIZE(arguments) > MAX_POSITIONS ||
        !PyTuple_CheckExact(outputs) || PyTuple_GET_SIZE(outputs) < 1 || PyTuple_GET_SIZE(outputs) > MAX_SLOTS) {
        PyErr_Format(PyExc_TypeError, "Record: arguments must be a tuple of up to %d and outputs of 1 to %d items",
                     MAX_POSITIONS, MAX_SLOTS);
        return -1;
    }
    if (!PyTuple_CheckExact(banks) || PyTuple_GET_SIZE(banks) < 1 || PyTuple_GET_SIZE(banks) > MAX_BANKS) {
        PyErr_Format(PyExc_TypeError, "Record: banks must be a tuple of 1 to %d (index, handle, addresses, launch)",
                     MAX_BANKS);
        return -1;
    }
    PyObject *first = PyTuple_GET_ITEM(banks, 0);
    Py_ssize_t nslots = PyTuple_CheckExact(first) && PyTuple_GET_SIZE(first) == 4 &&
                        PyTuple_CheckExact(PyTuple_GET_ITEM(first, 2)) ? PyTuple_GET_SIZE(PyTuple_GET_ITEM(first, 2)) : -1;
    if (nslots < narrays || nslots > MAX_SLOTS)
        return bad("each bank is (index, handle, addresses, launch), one address a slot");
    if (!PyLong_Check(rows) || !PyObject_TypeCheck(counts, &ReplayCountsType) ||
        !PyObject_TypeCheck(family, &FamilyStateType) || !PyCallable_Check(allocate) ||
        !(structure == Py_None || PyCallable_Check(structure)) ||
        (structure == Py_None && PyTuple_GET_SIZE(outputs) != 1))
        return bad("rows must be an int, counts a ReplayCounts, family a FamilyState, allocate callable and "
                   "structure None (one output) or callable");
    Record_clear(self);
    char covered[MAX_SLOTS] = {0};
    if (parse_arguments(self, arguments, narrays, covered) < 0 || parse_outputs(self, outputs, nslots, covered) < 0 ||
        all_covered(covered, nslots) < 0 || parse_banks(self, banks, nslots) < 0) {
        Record_clear(self);
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    PyObject *release = acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    if (release == NULL) { Py_XDECREF(acquire); Record_clear(self); return -1; }
    self->npositions = PyTuple_GET_SIZE(arguments);
    self->narrays = narrays;
    self->nslots = nslots;
    self->noutputs = PyTuple_GET_SIZE(outputs);
    self->device = device;
    self->stream = stream;
    self->generation = generation;
    self->graph_launch = (graph_launch_fn)(intptr_t)graph_launch;
#define KEEP(field) Py_INCREF(field); self->field = field;
    KEEP(array_type) KEEP(strides) KEEP(dtypes) KEEP(outputs) KEEP(structure) KEEP(allocate) KEEP(rows)
    KEEP(counts) KEEP(family) KEEP(current_stream) KEEP(shapes) /* shapes last: set means initialised */
#undef KEEP
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

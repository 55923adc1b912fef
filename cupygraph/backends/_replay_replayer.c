/* The Replayer: one plan's steady call served in C (cupygraph/backends/_replay.c says what the
 * extension is, cupygraph/backends/cupy_fast.py what it must equal). */
#include "_replay.h"

/* Launch the bank's one executable with the driver, as its launch would: 1 when launched, 0 when
 * its launch must do it (no handle, no driver entry point, the recording's launch is not the bank's
 * own (something wraps it), or a thread with no current context yet), -1 with an exception. */
static int launch_direct(Replayer *self, PyObject *bank, PyObject *stream_ptr) {
    if (self->graph_launch == NULL) return 0;
    PyObject *theirs = PyObject_GetAttr(self->recording, s_launch);
    if (theirs == NULL) return -1;
    PyObject *own = PyObject_GetAttr(bank, s_launch);
    if (own == NULL) { Py_DECREF(theirs); return -1; }
    int same = theirs == own || PyObject_RichCompareBool(theirs, own, Py_EQ) == 1;
    Py_DECREF(theirs);
    Py_DECREF(own);
    if (PyErr_Occurred()) return -1;
    if (!same) return 0;
    PyObject *handle = PyObject_GetAttr(bank, s_handle);
    if (handle == NULL) return -1;
    void *exec = PyLong_Check(handle) ? PyLong_AsVoidPtr(handle) : NULL;
    Py_DECREF(handle);
    if (exec == NULL) { PyErr_Clear(); return 0; }
    void *stream = PyLong_AsVoidPtr(stream_ptr);
    if (stream == NULL && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    int status;
    Py_BEGIN_ALLOW_THREADS  /* as CuPy's Graph.launch: a full launch queue blocks here */
    status = self->graph_launch(exec, stream);
    Py_END_ALLOW_THREADS
    if (status == 0) return 1;
    /* Refused before anything was queued: a thread with no current context yet (201; 3 before
     * initialisation), which the runtime behind the bank's launch sets up, or a stream or handle
     * of another context (400, 1), a destroyed context (709), a stream being captured (900-908),
     * which that launch reports in CuPy's words, as the Python path does. Any other status may report an earlier asynchronous error after this launch was
     * queued: never launch again, report it. */
    if (status == 201 || status == 3 || status == 400 || status == 1 || status == 709 ||
        (status >= 900 && status <= 908))
        return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "cuGraphLaunch failed with CUDA error %d (this or an earlier asynchronous launch failed)", status);
    return -1;
}

#define MISS 0
#define SERVED 1
#define FAILED -1

/* Under the family lock: the Python path's checks, then its updates, then the launch. Sets *out
 * (a new reference) when SERVED. Nothing is changed before the last check has passed, except what
 * the Python path would change too (the backend's last stream, for the same stream). */
static int replay_locked(Replayer *self, PyObject *args, PyObject **out) {
    int ok;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if ((ok = attr_is(self->plan, s_entry, self->entry)) != 1) return ok;  /* retired: RETIRED */
    if ((ok = attr_true(self->entry, s_alive)) != 1) return ok;
    if ((ok = attr_is(self->entry, s_constants_token, self->token)) != 1) return ok;
    if ((ok = attr_is(self->entry, s_run, self->run)) != 1) return ok;    /* still the plain run */
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((ok = attr_true(PyTuple_GET_ITEM(args, i), s_c_contiguous)) != 1) return ok;
    }

    int result = FAILED;
    PyObject *in_ptrs[MAX_ARGUMENTS] = {NULL};
    PyObject *stream = NULL, *last = NULL, *stream_ptr = NULL, *ring = NULL,
             *array = NULL, *out_ptr = NULL, *active = NULL, *current = NULL, *banks = NULL, *r = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((in_ptrs[i] = attr_ptr(PyTuple_GET_ITEM(args, i))) == NULL) goto done;
    }
    /* backend.order_after_last_use(): the same stream as the last replay, or one with its pointer */
    if ((stream = PyObject_CallNoArgs(self->current_stream)) == NULL) goto done;
    if ((last = PyObject_GetAttr(self->backend, s_last_stream)) == NULL) goto done;
    if ((stream_ptr = PyObject_GetAttr(stream, s_ptr)) == NULL) goto done;
    if (last != stream) {
        if (last == Py_None) { result = MISS; goto done; }
        PyObject *last_ptr = PyObject_GetAttr(last, s_ptr);
        if (last_ptr == NULL) goto done;
        ok = PyObject_RichCompareBool(last_ptr, stream_ptr, Py_EQ);
        Py_DECREF(last_ptr);
        if (ok != 1) { result = ok; goto done; }  /* another stream: the Python path orders it */
        if (PyObject_SetAttr(self->backend, s_last_stream, stream) < 0) goto done;
    }
    /* The output: the first array of the ring that nobody holds, made on this stream. */
    if ((ring = PyObject_GetAttr(self->slot, s_ring)) == NULL) goto done;
    if (!PyList_CheckExact(ring)) { result = MISS; goto done; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ring); i++) {
        PyObject *item = PyList_GET_ITEM(ring, i);
        Py_INCREF(item);  /* (held while its counts are read: reading may run other Python code) */
        ok = ring_item_free(item, stream_ptr);
        if (ok > 0) { array = PyList_GET_ITEM(item, 0); Py_INCREF(array); }
        Py_DECREF(item);
        if (ok < 0) goto done;
        if (ok) break;
    }
    if (array == NULL) { result = MISS; goto done; }
    if ((out_ptr = attr_ptr(array)) == NULL) goto done;
    /* The executable already holding both addresses: the active bank, or another one to switch to. */
    if ((active = PyObject_GetAttr(self->binder, s_active)) == NULL) goto done;
    if ((current = PyObject_GetAttr(active, s_current)) == NULL) goto done;
    ok = holds(current, in_ptrs, n, out_ptr);
    if (ok < 0) goto done;
    if (!ok) {
        if ((banks = PyObject_GetAttr(self->binder, s_banks)) == NULL) goto done;
        if (!PyList_CheckExact(banks)) { result = MISS; goto done; }
        PyObject *found = NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(banks) && found == NULL; i++) {
            PyObject *bank = PyList_GET_ITEM(banks, i);
            Py_INCREF(bank);  /* held while its addresses are compared (that may run Python code) */
            PyObject *held = PyObject_GetAttr(bank, s_current);
            ok = held == NULL ? -1 : holds(held, in_ptrs, n, out_ptr);
            Py_XDECREF(held);
            if (ok == 1) found = bank;
            else Py_DECREF(bank);
            if (ok < 0) goto done;
        }
        if (found == NULL) { result = MISS; goto done; }  /* nodes to re-point: the Python path */
        /* CupyBinder._switch(found) */
        PyObject *launch = PyObject_GetAttr(found, s_launch);
        if (launch == NULL) { Py_DECREF(found); goto done; }
        int rc = PyObject_SetAttr(self->recording, s_launch, launch);
        Py_DECREF(launch);
        Py_SETREF(active, found);  /* (the reference taken when found) */
        if (rc < 0 || PyObject_SetAttr(self->binder, s_active, active) < 0) goto done;
    }
    /* CupyBinder.bind's bookkeeping, then CUDAGraphEntry.launch */
    if (PyObject_SetAttr(active, s_fresh, Py_False) < 0) goto done;
    if (PyObject_SetAttr(self->binder, s_away, Py_True) < 0) goto done;
    if (attr_increment(self->binder, s_calls) < 0) goto done;
    if ((ok = launch_direct(self, active, stream_ptr)) < 0) goto done;
    if (!ok) {  /* recording.launch() is the bank's launch (CupyBinder._switch) */
        PyObject *launch = PyObject_GetAttr(self->recording, s_launch);
        if (launch == NULL) goto done;
        r = PyObject_CallNoArgs(launch);
        Py_DECREF(launch);
        if (r == NULL) goto done;
    }
    if (attr_increment(self->entry, s_replay_count) < 0) goto done;
    PyObject *tick = PyObject_CallNoArgs(self->use_tick);
    if (tick == NULL) goto done;
    int rc = PyObject_SetAttr(self->entry, s_last_used, tick);
    Py_DECREF(tick);
    if (rc < 0 || attr_increment(self->plan, s_hits) < 0) goto done;
    *out = array;
    array = NULL;
    result = SERVED;
done:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(in_ptrs[i]);
    Py_XDECREF(stream); Py_XDECREF(last); Py_XDECREF(stream_ptr);
    Py_XDECREF(ring); Py_XDECREF(array); Py_XDECREF(out_ptr); Py_XDECREF(active);
    Py_XDECREF(current); Py_XDECREF(banks); Py_XDECREF(r);
    return result;
}

/* replayer.replay(args): the result, or None when the Python path must serve this call. */
PyObject *Replayer_replay(Replayer *self, PyObject *args) {
    if (self->shapes == NULL || self->dtypes == NULL) goto pass;  /* never initialised, or cleared */
    Py_ssize_t n = PyTuple_GET_SIZE(self->shapes);
    if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != n) goto pass;
    for (Py_ssize_t i = 0; i < n; i++) {  /* the plan's key: exact array type, shape and dtype */
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if ((PyObject *)Py_TYPE(a) != self->array_type) goto pass;
        int ok = attr_is(a, s_dtype, PyTuple_GET_ITEM(self->dtypes, i));
        if (ok < 0) return NULL;
        if (!ok) goto pass;
        PyObject *shape = PyObject_GetAttr(a, s_shape);
        if (shape == NULL) return NULL;
        ok = PyObject_RichCompareBool(shape, PyTuple_GET_ITEM(self->shapes, i), Py_EQ);
        Py_DECREF(shape);
        if (ok < 0) return NULL;
        if (!ok) goto pass;
        /* With several GPUs, the Python path's routing: an array of another device is that device
         * family's call (an address alone does not say: freed memory may come back on another device). */
        if (self->device >= 0) {
            ok = on_device(a, self->device);
            if (ok < 0) return NULL;
            if (!ok) goto pass;
        }
    }

    PyObject *r = PyObject_CallNoArgs(self->acquire);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    PyObject *out = NULL;
    int result = replay_locked(self, args, &out);
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

static int Replayer_traverse(Replayer *self, visitproc visit, void *arg) {
#define VISIT_FIELD(field) Py_VISIT(self->field);
    REPLAYER_OBJECTS(VISIT_FIELD)
#undef VISIT_FIELD
    return 0;
}

static int Replayer_clear(Replayer *self) {
#define CLEAR_FIELD(field) Py_CLEAR(self->field);
    REPLAYER_OBJECTS(CLEAR_FIELD)
#undef CLEAR_FIELD
    return 0;
}

static void Replayer_dealloc(Replayer *self) {
    PyObject_GC_UnTrack(self);
    Replayer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Replayer_init(Replayer *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"array_type", "shapes", "dtypes", "plan", "entry", "token", "run", "binder", "slot",
                            "recording", "backend", "lock", "current_stream", "use_tick", "graph_launch", "device",
                            NULL};
    PyObject *array_type = NULL, *shapes = NULL, *dtypes = NULL, *plan = NULL, *entry = NULL, *token = NULL,
        *run = NULL, *binder = NULL, *slot = NULL, *recording = NULL, *backend = NULL, *lock = NULL,
        *current_stream = NULL, *use_tick = NULL;
    Py_ssize_t graph_launch = 0;
    long device = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOOOOOOOOOOOOnl", names, &array_type, &shapes, &dtypes, &plan,
                                     &entry, &token, &run, &binder, &slot, &recording, &backend, &lock,
                                     &current_stream, &use_tick, &graph_launch, &device))
        return -1;
    PyObject *given[] = {array_type, shapes, dtypes, plan, entry, token, run, binder, slot, recording, backend, lock,
                         current_stream, use_tick};
    for (int i = 0; i < 14; i++) {
        if (given[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "Replayer() needs the keyword argument %s", names[i]);
            return -1;
        }
    }
    if (self->plan != NULL) {
        PyErr_SetString(PyExc_TypeError, "Replayer: already initialised (a call may be inside it)");
        return -1;
    }
    if (!PyType_Check(array_type) || !PyTuple_CheckExact(shapes) || !PyTuple_CheckExact(dtypes) ||
        PyTuple_GET_SIZE(shapes) != PyTuple_GET_SIZE(dtypes) || PyTuple_GET_SIZE(shapes) < 1 ||
        PyTuple_GET_SIZE(shapes) > MAX_ARGUMENTS) {
        PyErr_Format(PyExc_TypeError, "Replayer: array_type must be a type, and shapes and dtypes tuples of 1 to "
                     "%d arguments' shapes and dtypes", MAX_ARGUMENTS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shapes); i++) {
        if (!PyTuple_CheckExact(PyTuple_GET_ITEM(shapes, i))) {
            PyErr_SetString(PyExc_TypeError, "Replayer: each of shapes must be a tuple");
            return -1;
        }
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    if (acquire == NULL) return -1;
    PyObject *release = PyObject_GetAttrString(lock, "release");
    if (release == NULL) { Py_DECREF(acquire); return -1; }
    Replayer_clear(self);
    Py_INCREF(array_type); self->array_type = array_type;
    Py_INCREF(shapes); self->shapes = shapes;
    Py_INCREF(dtypes); self->dtypes = dtypes;
    Py_INCREF(plan); self->plan = plan;
    Py_INCREF(entry); self->entry = entry;
    Py_INCREF(token); self->token = token;
    Py_INCREF(run); self->run = run;
    Py_INCREF(binder); self->binder = binder;
    Py_INCREF(slot); self->slot = slot;
    Py_INCREF(recording); self->recording = recording;
    Py_INCREF(backend); self->backend = backend;
    self->acquire = acquire;
    self->release = release;
    Py_INCREF(current_stream); self->current_stream = current_stream;
    Py_INCREF(use_tick); self->use_tick = use_tick;
    self->graph_launch = (graph_launch_fn)(intptr_t)graph_launch;
    self->device = device;
    return 0;
}

static PyObject *Replayer_get_served(Replayer *self, void *closure) { return PyLong_FromSsize_t(self->served); }
static PyObject *Replayer_get_passed(Replayer *self, void *closure) { return PyLong_FromSsize_t(self->passed); }
static PyObject *Replayer_get_plan(Replayer *self, void *closure) {
    PyObject *plan = self->plan ? self->plan : Py_None;
    Py_INCREF(plan);
    return plan;
}

static PyGetSetDef Replayer_getset[] = {
    {"served", (getter)Replayer_get_served, NULL, "calls this replayer served", NULL},
    {"passed", (getter)Replayer_get_passed, NULL, "calls it handed back to the Python path", NULL},
    {"plan", (getter)Replayer_get_plan, NULL, "the plan whose calls it serves", NULL},
    {NULL},
};

static PyMethodDef Replayer_methods[] = {
    {"replay", (PyCFunction)Replayer_replay, METH_O,
     "replay(args): the call's result, or None when the Python path must serve it"},
    {NULL},
};

PyTypeObject ReplayerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupygraph.backends._replay.Replayer",
    .tp_basicsize = sizeof(Replayer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled replay of one zero-copy plan (cupygraph/backends/cupy_fast.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Replayer_init,
    .tp_dealloc = (destructor)Replayer_dealloc,
    .tp_traverse = (traverseproc)Replayer_traverse,
    .tp_clear = (inquiry)Replayer_clear,
    .tp_getset = Replayer_getset,
    .tp_methods = Replayer_methods,
};

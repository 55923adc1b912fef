/* What both replay paths update, and the compiled replay's clock: each entry's ReplayCounts (read by the
 * statistics and eviction) and each graph family's FamilyState (whose generation Python bumps whenever
 * something a Record describes may have changed). Their own source, so the module (_replay.c) and the
 * Record (_replay_record.c) both use them without using each other's. */
#include "_fastpath.h"
#include <structmember.h>

static long long clock_now = 0;

/* The family-wide use clock (LRU order): Python's ``tick()`` and the Record's launches share it. */
CG_INTERNAL long long next_tick(void) { return ++clock_now; }

/* -- ReplayCounts and FamilyState ------------------------------------------------------------------ */

static PyObject *ReplayCounts_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    ReplayCounts *self = (ReplayCounts *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->last_bank = 0;
    if ((self->hits = PyDict_New()) == NULL) { Py_DECREF(self); return NULL; }
    return (PyObject *)self;
}

static int ReplayCounts_traverse(ReplayCounts *self, visitproc visit, void *arg) {
    Py_VISIT(self->hits);
    return 0;
}

static int ReplayCounts_clear(ReplayCounts *self) {
    Py_CLEAR(self->hits);
    return 0;
}

static void ReplayCounts_dealloc(ReplayCounts *self) {
    PyObject_GC_UnTrack(self);
    ReplayCounts_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef ReplayCounts_members[] = {
    {"replays", T_LONGLONG, offsetof(ReplayCounts, replays), 0, "launches of the entry's graph"},
    {"bound_calls", T_LONGLONG, offsetof(ReplayCounts, bound_calls), 0, "zero-copy calls"},
    {"last_used", T_LONGLONG, offsetof(ReplayCounts, last_used), 0, "the use clock at the last launch"},
    {"last_bank", T_LONGLONG, offsetof(ReplayCounts, last_bank), 0, "the executable launched last"},
    {"hits", T_OBJECT_EX, offsetof(ReplayCounts, hits), READONLY, "{real rows: calls} of the fast paths' hits"},
    {NULL},
};

PyTypeObject ReplayCountsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupygraph.backends.fastpath._replay.ReplayCounts",
    .tp_basicsize = sizeof(ReplayCounts),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One entry's counts, written by the compiled and the Python replay, read by the statistics.",
    .tp_new = ReplayCounts_new,
    .tp_dealloc = (destructor)ReplayCounts_dealloc,
    .tp_traverse = (traverseproc)ReplayCounts_traverse,
    .tp_clear = (inquiry)ReplayCounts_clear,
    .tp_members = ReplayCounts_members,
};

static PyObject *FamilyState_bump(FamilyState *self, PyObject *unused) {
    self->generation++;
    Py_RETURN_NONE;
}

static PyMemberDef FamilyState_members[] = {
    {"generation", T_LONGLONG, offsetof(FamilyState, generation), READONLY,
     "changes whenever something a Record describes may have changed"},
    {NULL},
};

static PyMethodDef FamilyState_methods[] = {
    {"bump", (PyCFunction)FamilyState_bump, METH_NOARGS, "bump(): every Record made before is stale"},
    {NULL},
};

PyTypeObject FamilyStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupygraph.backends.fastpath._replay.FamilyState",
    .tp_basicsize = sizeof(FamilyState),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A graph family's generation: a Record is valid while it describes the current one.",
    .tp_new = PyType_GenericNew,
    .tp_members = FamilyState_members,
    .tp_methods = FamilyState_methods,
};

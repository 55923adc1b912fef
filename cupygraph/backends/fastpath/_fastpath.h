/* Shared by the compiled replay's sources (cupygraph/backends/fastpath/_replay.c, _replay_counts.c,
 * _replay_record.c, _replay_record_type.c, _replay_helpers.c): its object types and helpers.
 *
 * The contract with Python (cupygraph/backends/fastpath/record.py builds what C reads): a Record is built
 * once per shortcut and never changes; it refers to two mutable objects of this module, the entry's
 * ReplayCounts (written by both paths, read by the statistics) and the family's FamilyState (whose
 * generation Python bumps whenever anything a Record describes may have changed). C reads no other
 * Python object's attributes than CuPy arrays' public ones (shape, dtype, strides, data.ptr,
 * data.device_id, data.mem) and a stream's ptr; it calls the record's own callables (allocate, a
 * structure that is not a tuple or list, a bank's launch, the lock) and compares static values with ==. */
#ifndef CUPYGRAPH_FASTPATH_H
#define CUPYGRAPH_FASTPATH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

/* Visible to the module's own sources only. */
#define CG_INTERNAL __attribute__((visibility("hidden")))

#define MAX_ARGUMENTS 8   /* array arguments of one call */
#define MAX_POSITIONS 32  /* arguments of one call, arrays or not */
#define MAX_SLOTS 32      /* addresses a record compares: the call's arrays and bound outputs */
#define MAX_BANKS 8

/* cuGraphLaunch(CUgraphExec, CUstream) from libcuda, found by driver/__init__.py; 0 = not found. */
typedef int (*graph_launch_fn)(void *, void *);

/* Per entry, written by both paths: what the statistics and eviction read. */
typedef struct {
    PyObject_HEAD
    long long replays;     /* launches of the entry's graph */
    long long bound_calls; /* zero-copy calls (each binds every argument it does not copy) */
    long long last_used;   /* the family-wide use clock (tick()) at the last launch: LRU */
    long long last_bank;   /* the executable launched last (a re-point prefers another one) */
    PyObject *hits;        /* {real rows: calls} of the fast paths' hits */
} ReplayCounts;

/* Per graph family: a Record is valid while its generation is the family's. */
typedef struct {
    PyObject_HEAD
    long long generation;
} FamilyState;

/* What a call's argument at one position must be for a record to serve it. */
enum { ARG_ARRAY, ARG_SAME, ARG_EQUAL };
/* How one leaf of the result is made. */
enum { OUT_RING, OUT_FRESH, OUT_AS_IS };

typedef struct {
    PyObject_HEAD
    graph_launch_fn graph_launch;             /* NULL: launch through the bank's launch callable */
    long device;                              /* each array's device is checked; -1: one GPU */
    long long generation;                     /* the family's generation this record describes */
    unsigned long long stream;                /* calls must come on this stream (the last replay's) */
    Py_ssize_t npositions, narrays, nslots, noutputs, nbanks;
    signed char kinds[MAX_POSITIONS];         /* per call position: ARG_* */
    Py_ssize_t array_of[MAX_POSITIONS];       /* per ARG_ARRAY position: its array (= its slot) */
    signed char output_kind[MAX_SLOTS];       /* per result leaf: OUT_* */
    Py_ssize_t output_slot[MAX_SLOTS];        /* per bound result leaf (ring or fresh): its slot */
    unsigned long long addresses[MAX_BANKS][MAX_SLOTS]; /* per bank: the address each compared slot holds */
    long long bank_index[MAX_BANKS];          /* per bank: its place among the recording's (counts.last_bank) */
    void *handles[MAX_BANKS];                 /* per bank: its one executable (0: launch through Python) */
    PyObject *array_type, *shapes, *strides, *dtypes; /* the arrays' exact type and layout */
    PyObject *expected;                       /* per position: None, the object (SAME) or (type, value) (EQUAL) */
    PyObject *outputs;                        /* per leaf: (kind, slot, ring) / (kind, slot, shape, dtype) / (kind, obj) */
    PyObject *structure;                      /* None: one leaf; tuple or list: those of the leaves; else called */
    PyObject *allocate;                       /* allocate(shape, dtype): a fresh output array */
    PyObject *launches;                       /* per bank: a callable that launches it on the current stream */
    PyObject *rows;                           /* the key of this shortcut's hits in counts.hits */
    PyObject *counts, *family;                /* ReplayCounts, FamilyState */
    PyObject *acquire, *release, *current_stream;
    Py_ssize_t served, passed;
} Record;

/* Every object a Record holds (its traverse and clear visit each). */
#define RECORD_OBJECTS(X) X(array_type) X(shapes) X(strides) X(dtypes) X(expected) X(outputs) X(structure) \
    X(allocate) X(launches) X(rows) X(counts) X(family) X(acquire) X(release) X(current_stream)

extern CG_INTERNAL PyTypeObject RecordType, ReplayCountsType, FamilyStateType;
CG_INTERNAL PyObject *Record_replay(Record *self, PyObject *args);
CG_INTERNAL long long next_tick(void);

/* Interned names of CuPy's public attributes (replay_intern_names). */
extern CG_INTERNAL PyObject *s_shape, *s_dtype, *s_strides, *s_data, *s_ptr, *s_mem, *s_device_id;
extern CG_INTERNAL PyObject *getweakrefcount; /* weakref.getweakrefcount */

CG_INTERNAL int replay_intern_names(void);
CG_INTERNAL int measure(PyObject *item, Py_ssize_t counts[4]);
CG_INTERNAL int ring_item_free(PyObject *item, unsigned long long stream);
CG_INTERNAL int array_ptr(PyObject *array, unsigned long long *ptr);
CG_INTERNAL int on_device(PyObject *array, long device);
CG_INTERNAL int attr_equals(PyObject *obj, PyObject *name, PyObject *expected);

#endif

/* Shared by the compiled replay's sources (cupygraph/backends/_replay.c, _replay_helpers.c,
 * _replay_replayer.c): the attribute names it reads, the Replayer object, and their helpers. */
#ifndef CUPYGRAPH_REPLAY_H
#define CUPYGRAPH_REPLAY_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

/* Visible to the module's own sources only. */
#define CG_INTERNAL __attribute__((visibility("hidden")))

/* Interned attribute names (replay_intern_names). */
extern CG_INTERNAL PyObject *s_device_id, *s_shape, *s_dtype, *s_c_contiguous, *s_data, *s_ptr, *s_mem, *s_entry,
    *s_alive, *s_constants_token, *s_run, *s_last_stream, *s_active, *s_current, *s_ring, *s_banks, *s_fresh,
    *s_launch, *s_away, *s_replay_count, *s_last_used, *s_hits, *s_calls, *s_handle, *s__call;
extern CG_INTERNAL PyObject *getweakrefcount; /* weakref.getweakrefcount */
extern CG_INTERNAL PyObject *one;             /* the int 1 */

#define MAX_ARGUMENTS 8

/* cuGraphLaunch(CUgraphExec, CUstream) from libcuda, found by cupy_fast.py; 0 = not found. */
typedef int (*graph_launch_fn)(void *, void *);

typedef struct {
    PyObject_HEAD
    graph_launch_fn graph_launch;                     /* NULL: launch through recording.launch() */
    long device;                                      /* the home device, checked per argument; -1: one GPU */
    PyObject *array_type, *shapes, *dtypes;           /* the plan's array arguments, in order */
    PyObject *plan, *entry, *token, *run;             /* what must still hold under the lock */
    PyObject *binder, *slot, *recording, *backend;    /* the state both paths share */
    PyObject *acquire, *release, *current_stream, *use_tick;
    Py_ssize_t served, passed;                        /* calls served here, calls handed back */
} Replayer;

/* Every object a Replayer holds (its traverse and clear visit each). */
#define REPLAYER_OBJECTS(X) X(array_type) X(shapes) X(dtypes) X(plan) X(entry) X(token) X(run) X(binder) \
    X(slot) X(recording) X(backend) X(acquire) X(release) X(current_stream) X(use_tick)

extern CG_INTERNAL PyTypeObject ReplayerType;
CG_INTERNAL PyObject *Replayer_replay(Replayer *self, PyObject *args);

CG_INTERNAL int replay_intern_names(void);
CG_INTERNAL int measure(PyObject *item, Py_ssize_t counts[4]);
CG_INTERNAL int ring_item_free(PyObject *item, PyObject *stream_ptr);
CG_INTERNAL int holds(PyObject *current, PyObject *const *in_ptrs, Py_ssize_t n, PyObject *out_ptr);
CG_INTERNAL int attr_is(PyObject *obj, PyObject *name, PyObject *expected);
CG_INTERNAL int attr_true(PyObject *obj, PyObject *name);
CG_INTERNAL int attr_increment(PyObject *obj, PyObject *name);
CG_INTERNAL PyObject *attr_ptr(PyObject *array);
CG_INTERNAL int on_device(PyObject *array, long device);

#endif

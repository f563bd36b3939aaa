/* The blocking-pool driver (--blocking-threads): the thread inside serve()
 * and the run_pool() threads share the loop and its requests through the
 * queue of net/workq.h, one role at a time (leader, running a request,
 * standby). See serve_internal.h and docs/ARCHITECTURE.md, "Slow-view
 * isolation". */
#include "serve_internal.h"

#include <errno.h>
#include <stdint.h>
#include <time.h>

#include "pyerr.h"

/* Blocking-pool mode: the thread inside serve() and the run_pool() threads
 * share the loop and its requests (net/workq.h). Each runs pool_serve with
 * its own pool_thread. */
typedef struct {
    ServerObject *self;
    m0_wsgi *w;             /* the thread's bridge (a pooled clone) */
    volatile int64_t *beat; /* its heartbeat slot, NULL: none */
    int checks_signals;     /* the thread inside serve(): signal handlers may be due */
    uint64_t checked_ms;    /* monotonic ms of its last signal check */
} pool_thread;

static uint64_t pool_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *pool_gil_release(void *arg)
{
    (void)arg;
    return PyEval_SaveThread();
}

static void pool_gil_acquire(void *arg, void *token)
{
    (void)arg;
    PyEval_RestoreThread((PyThreadState *)token);
}

static void pool_run_item(void *arg, void *item)
{
    pool_thread *pt = arg;
    if (pt->beat != NULL) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        *pt->beat = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    }
    m0_wsgi_serve_detached(pt->w, (m0_exchange *)item);
    if (pt->beat != NULL)
        *pt->beat = 0;
    if (PyErr_Occurred()) /* the bridge never leaves one: do not lose it */
        PyErr_WriteUnraisable((PyObject *)pt->self);
}

/* The thread inside serve(), at most once per M0_SERVE_MAX_WAIT_MS or after
 * EINTR: on the main thread, the signal handlers. A handler that raised
 * stops the loop (-EINTR, its exception set). */
static int pool_duties(pool_thread *pt, int force)
{
    if (!pt->checks_signals)
        return 0;
    uint64_t now = pool_now_ms();
    if (!force && now - pt->checked_ms < M0_SERVE_MAX_WAIT_MS)
        return 0;
    pt->checked_ms = now;
    return PyErr_CheckSignals() < 0 ? -EINTR : 0; /* (a no-op outside the main thread) */
}

/* The leader's pass (net/workq.h). With the GIL, the wait hooks drop it
 * around a wait that blocks; without (every other thread in a view), the
 * hooks do nothing and the Python duties (the bridge's left exception, the
 * access log, signals) wait for M0_WORKQ_PASS_DUTIES, at most once per
 * M0_SERVE_MAX_WAIT_MS. */
static int pool_run_pass(void *arg, int gil)
{
    pool_thread *pt = arg;
    ServerObject *self = pt->self;
    if (serve_should_stop(self))
        return 1;
    self->pass_nogil = !gil;
    int r = m0_loop_run_once(self->loop, M0_SERVE_MAX_WAIT_MS);
    self->pass_nogil = 0;
    if (r < 0 && r != -EINTR) {
        __atomic_store_n(&self->pool_error, r, __ATOMIC_RELEASE);
        return r;
    }
    if (!gil)
        return r == -EINTR || pool_now_ms() - pt->checked_ms >= M0_SERVE_MAX_WAIT_MS ? M0_WORKQ_PASS_DUTIES : 0;
    if (PyErr_Occurred()) /* a bridge must not leave one set: never lose it silently */
        PyErr_WriteUnraisable((PyObject *)self);
    m0_serve_access_log_flush(self); /* as the inline mode does after each pass */
    return pool_duties(pt, r == -EINTR);
}

/* GIL held: the periodic duties, after an idle wait (serve()'s thread, the
 * only one with idle waits) or passes led without the GIL (any thread). */
static int pool_idle(void *arg)
{
    pool_thread *pt = arg;
    if (PyErr_Occurred())
        PyErr_WriteUnraisable((PyObject *)pt->self);
    m0_serve_access_log_flush(pt->self); /* lines another thread's pass left */
    if (!pt->checks_signals)
        pt->checked_ms = pool_now_ms(); /* pool_duties keeps the time of serve()'s thread */
    return pool_duties(pt, 1);
}

/* GIL held: serve until the loop is done. 0, or -errno: -EINTR (a signal
 * handler raised, its exception set), -ENOSPC and -ENOMEM (exception set). */
static int pool_serve(ServerObject *self, volatile int64_t *beat, int checks_signals)
{
    m0_workq_role role;
    if (m0_workq_join(self->workq, &role) < 0) {
        PyErr_Format(PyExc_RuntimeError, "run_pool() called by more than blocking_threads (%d) threads",
                     self->blocking_threads);
        return -ENOSPC;
    }
    pool_thread pt = {self, m0_wsgi_clone(self->wsgi), beat, checks_signals, pool_now_ms()};
    if (pt.w == NULL) {
        m0_workq_close(self->workq); /* one of the loop's threads is missing: stop them all */
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -ENOMEM;
    }
    if (beat != NULL)
        *beat = 0;
    /* The switch interval, after which a thread waiting for the GIL forces
     * it over (sys.setswitchinterval; 5 ms by default). */
    uint64_t switch_interval_ns = 0;
    PyObject *get = PySys_GetObject("getswitchinterval"); /* borrowed */
    PyObject *interval = get != NULL ? PyObject_CallNoArgs(get) : NULL;
    double seconds = interval != NULL ? PyFloat_AsDouble(interval) : -1.0;
    Py_XDECREF(interval);
    if (seconds > 0)
        switch_interval_ns = (uint64_t)(seconds * 1e9);
    PyErr_Clear();
    m0_workq_ops ops = {
        .arg = &pt,
        .gil_release = pool_gil_release,
        .gil_acquire = pool_gil_acquire,
        .run_item = pool_run_item,
        .run_pass = pool_run_pass,
        .idle = pool_idle,
        .idle_ms = checks_signals ? M0_SERVE_MAX_WAIT_MS : 0,
        .switch_interval_ns = switch_interval_ns,
    };
    int r = m0_workq_serve(self->workq, &role, &ops);
    m0_wsgi_free(pt.w);
    return r;
}

/* How long serve() waits, after a failed pass, for the pool's threads to
 * come back from the requests they run. */
#define M0_POOL_WIND_DOWN_MS 10000

/* GIL held, after a pass failed: the queue is closed, so no thread leads
 * the loop again once the one in a pass (if any) is out. The server is
 * drained (drain) and aborted; the requests still queued end unrun (503,
 * their connections close), those running end as their threads come back
 * (their sockets are shut down), and their completions are taken here, as
 * the loop's wake-up would have. */
static void pool_wind_down(ServerObject *self, int drain)
{
    PyThreadState *ts = PyEval_SaveThread();
    (void)m0_workq_quiesce(self->workq, 0, M0_POOL_WIND_DOWN_MS); /* at most one pass */
    if (drain)
        m0_server_drain_abort(self->srv);
    else
        m0_server_abort(self->srv);
    m0_exchange *x;
    while ((x = m0_workq_pop(self->workq)) != NULL)
        m0_exchange_complete(x, 0, 503, 0);
    (void)m0_workq_quiesce(self->workq, 1, M0_POOL_WIND_DOWN_MS); /* a view that never ends keeps its connection */
    m0_server_take_completed(self->srv);
    PyEval_RestoreThread(ts);
}

PyObject *m0_serve_pool(ServerObject *self)
{
    int r = pool_serve(self, self->serve_beat, 1);
    if (r == -ENOSPC || r == -ENOMEM)
        return NULL;
    m0_serve_access_log_flush(self);
    if (r == -EINTR) {
        /* A signal handler raised: close everything, propagate. The queue
         * is closed: no thread leads the loop once a pass in progress ends. */
        PyObject *exc = m0_exc_fetch();
        pool_wind_down(self, 1);
        m0_serve_access_log_flush(self); /* the lines of the requests it ended */
        __atomic_store_n(&self->shutdown_requested, 1, __ATOMIC_RELEASE);
        m0_exc_restore(exc);
        return NULL;
    }
    r = r < 0 ? r : __atomic_load_n(&self->pool_error, __ATOMIC_ACQUIRE);
    if (r < 0) {
        pool_wind_down(self, 0);
        m0_serve_access_log_flush(self);
        return serve_errno(r);
    }
    Py_RETURN_NONE;
}

/* A pool thread's body: serve the requests the loop queues, each with the
 * GIL held, until serve() returns. heartbeat_index: this thread's slot in
 * the heartbeat buffer (-1: none). */
PyObject *m0_serve_run_pool(ServerObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"heartbeat_index", NULL};
    Py_ssize_t index = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:run_pool", kwlist, &index))
        return NULL;
    if (self->workq == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "run_pool() needs blocking_threads > 0");
        return NULL;
    }
    volatile int64_t *beat = NULL;
    if (index >= 0 && self->heartbeat_held) {
        if ((size_t)index >= (size_t)self->heartbeat.len / sizeof(int64_t)) {
            PyErr_Format(PyExc_ValueError, "heartbeat_index %zd is outside the heartbeat buffer", index);
            return NULL;
        }
        beat = (volatile int64_t *)((char *)self->heartbeat.buf + (size_t)index * sizeof(int64_t));
        *beat = 0;
    }
    Py_INCREF(self); /* the pool outlives nothing it uses */
    int r = pool_serve(self, beat, 0);
    Py_DECREF(self);
    if (r == -ENOSPC || r == -ENOMEM)
        return NULL;
    Py_RETURN_NONE;
}

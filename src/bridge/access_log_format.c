/* Compiling the access-log format from Python, and writing the buffered
 * lines of a dying worker (see access_log_format.h). */
#include "access_log_format.h"
#include <errno.h>
#include <signal.h>
#include <string.h>

int m0_access_log_format_from_py(PyObject *fmt, int json, m0_access_log **out)
{
    *out = NULL;
    if (fmt == Py_None && !json)
        return 0;
    const char *text = NULL;
    Py_ssize_t len = 0;
    if (fmt != Py_None) {
        if (!PyUnicode_Check(fmt)) {
            PyErr_SetString(PyExc_TypeError, "access_log_format must be a str or None");
            return -1;
        }
        text = PyUnicode_AsUTF8AndSize(fmt, &len);
        if (text == NULL)
            return -1;
    }
    char err[160];
    int r = m0_access_log_compile(out, text, (size_t)len, json, err, sizeof(err));
    if (r == -ENOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (r < 0) {
        PyErr_SetString(PyExc_ValueError, err);
        return -1;
    }
    return 0;
}

static PyObject *check_access_log_format(PyObject *module, PyObject *args, PyObject *kwds)
{
    (void)module;
    static char *kwlist[] = {"fmt", "json", NULL};
    PyObject *fmt;
    int json = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:check_access_log_format", kwlist, &fmt, &json))
        return NULL;
    m0_access_log *f;
    if (m0_access_log_format_from_py(fmt, json, &f) < 0)
        return NULL;
    m0_access_log_free(f);
    Py_RETURN_NONE;
}

/* --- lines buffered by a worker about to die --- */

static PyObject *flush_access_logs(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    m0_access_log_buf_flush_all();
    Py_RETURN_NONE;
}

static void flush_on_signal(int signum)
{
    (void)signum;
    m0_access_log_buf_flush_all();
}

/* The handler replaces the signal's disposition; whoever registers after
 * it with chaining (faulthandler.register(..., chain=True)) runs it after
 * its own. */
static PyObject *flush_access_logs_on(PyObject *module, PyObject *arg)
{
    (void)module;
    long signum = PyLong_AsLong(arg);
    if (signum == -1 && PyErr_Occurred())
        return NULL;
    if (signum < 1 || signum >= NSIG) {
        PyErr_SetString(PyExc_ValueError, "signal number out of range");
        return NULL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = flush_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction((int)signum, &sa, NULL) < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyMethodDef access_log_methods[] = {
    {"flush_access_logs", flush_access_logs, METH_NOARGS,
     "flush_access_logs()\n--\n\nWrite the access-log lines every Server of this process holds, except those of a "
     "loop busy writing (for an exit that skips serve()'s own flush). Safe from any thread."},
    {"flush_access_logs_on", flush_access_logs_on, METH_O,
     "flush_access_logs_on(signum)\n--\n\nInstall a C handler for signum that writes the buffered access-log lines "
     "(async-signal-safe; runs even while the thread serving is stuck in a view)."},
    {"check_access_log_format", (PyCFunction)(void (*)(void))check_access_log_format, METH_VARARGS | METH_KEYWORDS,
     "check_access_log_format(fmt, json=False)\n--\n\nRaise ValueError when fmt is not a valid access-log format."},
    {NULL, NULL, 0, NULL},
};

int m0_access_log_format_module_init(PyObject *module)
{
    return PyModule_AddFunctions(module, access_log_methods);
}

/* The access log handed to a Python callable (Server's access_log=callable):
 * the engine writes its lines to a memfd, which never blocks and never drops
 * a line, and threads holding the GIL pass them on, never from inside a
 * connection callback. See serve_internal.h. */
#include "serve_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../net/portable.h"
#include "tls_options.h"

int m0_serve_access_log_init(ServerObject *self, PyObject *access_log, int *fd)
{
    if (!PyCallable_Check(access_log)) {
        int on = PyObject_IsTrue(access_log);
        if (on < 0)
            return -1;
        *fd = on ? 2 : -1;
        return 0;
    }
    int mfd = m0_memfd_open("m0serve-access-log");
    if (mfd < 0 || fcntl(mfd, F_SETFL, O_APPEND) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        if (mfd >= 0)
            close(mfd);
        return -1;
    }
    self->access_log = Py_NewRef(access_log);
    self->access_log_fd = mfd;
    *fd = mfd;
    return 0;
}

/* Pass the access-log lines written since the last call to the access_log
 * callable, as one str of complete lines. Call with the GIL held and no
 * exception set, never from inside a connection callback.
 *
 * The loop thread appends (O_APPEND) and may run without the GIL (blocking
 * pool), so the reader never truncates: it keeps its offset, takes only
 * whole lines (a line being written may be half there), and gives the pages
 * it has read back with FALLOC_FL_PUNCH_HOLE. Readers are serialised by
 * access_log_flushing, taken by compare-and-swap (a free-threaded build has
 * no GIL to do it; a reader that finds it taken leaves the lines to the
 * thread flushing, or to the next pass), so lines reach the callable in order
 * and access_log_read/freed have one writer at a time. An
 * exception of the callable is reported as unraisable: the log must not stop
 * the server. */
static void flush_held(ServerObject *self)
{
    struct stat st;
    if (fstat(self->access_log_fd, &st) < 0 || (uint64_t)st.st_size <= self->access_log_read)
        return;
    size_t avail = (size_t)((uint64_t)st.st_size - self->access_log_read);
    char *buf = PyMem_Malloc(avail);
    if (buf == NULL) {
        PyErr_NoMemory();
        PyErr_WriteUnraisable((PyObject *)self);
        return;
    }
    size_t got = 0;
    while (got < avail) {
        ssize_t n = pread(self->access_log_fd, buf + got, avail - got, (off_t)(self->access_log_read + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    while (got > 0 && buf[got - 1] != '\n')
        got--;
    if (got == 0) {
        PyMem_Free(buf);
        return;
    }
    self->access_log_read += got;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t done = self->access_log_read / page * page;
    if (done > self->access_log_freed && m0_file_punch(self->access_log_fd, (off_t)done) == 0)
        self->access_log_freed = done;
    PyObject *callable = Py_NewRef(self->access_log);
    PyObject *text = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)got, "backslashreplace");
    PyMem_Free(buf);
    PyObject *r = NULL;
    if (text != NULL) {
        r = PyObject_CallOneArg(callable, text);
        Py_DECREF(text);
    }
    if (r == NULL)
        PyErr_WriteUnraisable(callable);
    Py_XDECREF(r);
    Py_DECREF(callable);
}

void m0_serve_access_log_flush(ServerObject *self)
{
    /* The same moments suit the engine's other lines: refused client
     * certificates, at most one line a second. */
    m0_tls_options_warn_refusals(self->tls, self->logger);
    int idle = 0;
    if (self->access_log_fd < 0 || self->access_log == NULL ||
        !__atomic_compare_exchange_n(&self->access_log_flushing, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    flush_held(self);
    __atomic_store_n(&self->access_log_flushing, 0, __ATOMIC_RELEASE);
}

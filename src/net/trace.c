/* See trace.h. Built to nothing without M0_POOL_TRACE. */
#include "trace.h"

#ifdef M0_POOL_TRACE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define M0_TRACE_CAP (16u << 20) /* events; the file is sparse until written */

static m0_trace_event *trace_buf;
static uint64_t trace_next;
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static __thread int trace_slot = -1;

static void trace_open(void)
{
    const char *base = getenv("M0_POOL_TRACE");
    if (base == NULL || *base == 0)
        return;
    char path[512];
    snprintf(path, sizeof(path), "%s.%d", base, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    size_t size = (size_t)M0_TRACE_CAP * sizeof(m0_trace_event);
    if (ftruncate(fd, (off_t)size) == 0) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED)
            trace_buf = p;
    }
    close(fd);
}

void m0_trace_set_slot(int slot)
{
    trace_slot = slot;
}

void m0_trace(uint32_t kind, uint64_t a, uint64_t b, uint64_t c)
{
    pthread_once(&trace_once, trace_open);
    if (trace_buf == NULL)
        return;
    uint64_t i = __atomic_fetch_add(&trace_next, 1, __ATOMIC_RELAXED);
    if (i >= M0_TRACE_CAP)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m0_trace_event *e = &trace_buf[i];
    e->kind = kind;
    e->slot = trace_slot;
    e->a = a;
    e->b = b;
    e->c = c;
    __atomic_store_n(&e->t, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, __ATOMIC_RELEASE);
}

long m0_trace_recv(const void *conn, int fd, void *buf, size_t len)
{
    struct iovec iov = {buf, len};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(fd, &msg, 0);
    if (n <= 0)
        return n;
    uint64_t arrived = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
        struct timespec rt, now_rt, now_mono;
        memcpy(&rt, CMSG_DATA(cm), sizeof(rt));
        clock_gettime(CLOCK_REALTIME, &now_rt);
        clock_gettime(CLOCK_MONOTONIC, &now_mono);
        int64_t ago = ((int64_t)now_rt.tv_sec - rt.tv_sec) * 1000000000 + (now_rt.tv_nsec - rt.tv_nsec);
        arrived = (uint64_t)now_mono.tv_sec * 1000000000u + (uint64_t)now_mono.tv_nsec - (uint64_t)ago;
    } else {
        int on = 1;
        (void)setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
    }
    m0_trace(M0_TR_READ, (uint64_t)(uintptr_t)conn, (uint64_t)n, arrived);
    return n;
}

void m0_trace_thread_usage(uint64_t *cpu_ns, uint64_t *switches)
{
    struct timespec ts;
    struct rusage ru;
    *cpu_ns =
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0 ? (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec : 0;
    *switches = getrusage(RUSAGE_THREAD, &ru) == 0 ? (uint64_t)ru.ru_nvcsw << 32 | (uint32_t)ru.ru_nivcsw : 0;
}
#else
typedef int m0_trace_unused; /* an empty translation unit is not ISO C */
#endif

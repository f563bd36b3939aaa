/* The native hello handler: answers every request with a fixed 13-byte
 * "Hello, world!" (text/plain) from C, with no Python on the request path.
 * It is how the HTTP layer alone is measured (`m0serve --native hello`).
 * No Python.h here. */
#ifndef M0_NET_NATIVE_HELLO_H
#define M0_NET_NATIVE_HELLO_H

#include "server.h"

/* The handler's ctx. */
typedef struct {
    int server_header; /* send "Server: m0serve" */
} m0_native_hello;

/* Synchronous: reads and discards any request body, one writev, finish. */
extern const m0_handler m0_native_hello_handler;

#endif

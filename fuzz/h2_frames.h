/* What a fuzzed HTTP/2 server may send (shared by fuzz/fuzz_h2.c and
 * fuzz/fuzz_h2_seq.c): a sequence of whole frames, starting with SETTINGS,
 * none larger than the default SETTINGS_MAX_FRAME_SIZE, none of an unknown
 * type. One translation unit each (a static function). */
#ifndef M0_FUZZ_H2_FRAMES_H
#define M0_FUZZ_H2_FRAMES_H

#include <stddef.h>

/* 0, or -1 with *why. Output cut inside a frame by a close is whole. */
static int h2_frames(const unsigned char *out, size_t len, const char **why)
{
    size_t off = 0;
    int first = 1;
    while (off + 9 <= len) {
        size_t n = ((size_t)out[off] << 16) | ((size_t)out[off + 1] << 8) | out[off + 2];
        unsigned type = out[off + 3];
        if (first && type != 0x4) {
            *why = "the first frame is not SETTINGS";
            return -1;
        }
        first = 0;
        if (n > 16384) {
            *why = "a frame over the default SETTINGS_MAX_FRAME_SIZE";
            return -1;
        }
        if (type > 0x9) {
            *why = "a frame of unknown type";
            return -1;
        }
        if (off + 9 + n > len)
            return 0; /* the connection ended inside a frame: output cut by a close */
        off += 9 + n;
    }
    return 0;
}

#endif

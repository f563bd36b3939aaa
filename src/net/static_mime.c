/* Static files: the Content-Type by extension (static_int.h). The table is
 * nginx's mime.types for what a web app ships, plus the modern formats
 * (wasm, avif, woff2, mjs, webmanifest), sorted by extension for a binary
 * search. Text types say charset=utf-8, as Django's collectstatic output and
 * whitenoise assume. */
#include <string.h>

#include "static_int.h"

#define TEXT "; charset=utf-8"

typedef struct {
    const char *ext;
    const char *type;
} mime_row;

static const mime_row mime_table[] = {
    {"7z", "application/x-7z-compressed"},
    {"aac", "audio/aac"},
    {"apng", "image/apng"},
    {"atom", "application/atom+xml"},
    {"avif", "image/avif"},
    {"bin", "application/octet-stream"},
    {"bmp", "image/bmp"},
    {"bz2", "application/x-bzip2"},
    {"css", "text/css" TEXT},
    {"csv", "text/csv" TEXT},
    {"doc", "application/msword"},
    {"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
    {"eot", "application/vnd.ms-fontobject"},
    {"epub", "application/epub+zip"},
    {"flac", "audio/flac"},
    {"gif", "image/gif"},
    {"gz", "application/gzip"},
    {"htm", "text/html" TEXT},
    {"html", "text/html" TEXT},
    {"ico", "image/x-icon"},
    {"ics", "text/calendar" TEXT},
    {"jar", "application/java-archive"},
    {"jpeg", "image/jpeg"},
    {"jpg", "image/jpeg"},
    {"js", "text/javascript" TEXT},
    {"json", "application/json"},
    {"jsonld", "application/ld+json"},
    {"m4a", "audio/mp4"},
    {"m4v", "video/mp4"},
    {"map", "application/json"},
    {"md", "text/markdown" TEXT},
    {"mid", "audio/midi"},
    {"mjs", "text/javascript" TEXT},
    {"mov", "video/quicktime"},
    {"mp3", "audio/mpeg"},
    {"mp4", "video/mp4"},
    {"mpeg", "video/mpeg"},
    {"oga", "audio/ogg"},
    {"ogg", "audio/ogg"},
    {"ogv", "video/ogg"},
    {"otf", "font/otf"},
    {"pdf", "application/pdf"},
    {"png", "image/png"},
    {"ppt", "application/vnd.ms-powerpoint"},
    {"pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
    {"rar", "application/vnd.rar"},
    {"rss", "application/rss+xml"},
    {"rtf", "application/rtf"},
    {"svg", "image/svg+xml"},
    {"svgz", "image/svg+xml"},
    {"tar", "application/x-tar"},
    {"tif", "image/tiff"},
    {"tiff", "image/tiff"},
    {"ts", "video/mp2t"},
    {"ttf", "font/ttf"},
    {"txt", "text/plain" TEXT},
    {"wasm", "application/wasm"},
    {"wav", "audio/wav"},
    {"weba", "audio/webm"},
    {"webm", "video/webm"},
    {"webmanifest", "application/manifest+json"},
    {"webp", "image/webp"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"xhtml", "application/xhtml+xml"},
    {"xls", "application/vnd.ms-excel"},
    {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
    {"xml", "text/xml" TEXT},
    {"yaml", "application/yaml"},
    {"yml", "application/yaml"},
    {"zip", "application/zip"},
};

#define DEFAULT_TYPE "application/octet-stream"

const char *m0__static_mime(const char *name, size_t len, size_t *out_len)
{
    const char *dot = NULL;
    for (size_t i = len; i > 0; i--) {
        if (name[i - 1] == '.') {
            dot = name + i;
            break;
        }
        if (name[i - 1] == '/')
            break;
    }
    char ext[16];
    size_t n = dot != NULL ? (size_t)(name + len - dot) : 0;
    if (n == 0 || n >= sizeof(ext)) {
        *out_len = sizeof(DEFAULT_TYPE) - 1;
        return DEFAULT_TYPE;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = dot[i];
        ext[i] = ch >= 'A' && ch <= 'Z' ? (char)(ch | 0x20) : ch;
    }
    ext[n] = '\0';
    size_t lo = 0, hi = sizeof(mime_table) / sizeof(mime_table[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int cmp = strcmp(ext, mime_table[mid].ext);
        if (cmp == 0) {
            *out_len = strlen(mime_table[mid].type);
            return mime_table[mid].type;
        }
        if (cmp < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *out_len = sizeof(DEFAULT_TYPE) - 1;
    return DEFAULT_TYPE;
}

/* The parser built again without its SIMD scanners and under other names, so
 * that fuzz_parser can check both builds agree on every input. */
#define M0_PARSER_NO_SIMD 1
#define m0_parse_request m0_parse_request_nosimd
#define m0_parse_error_status m0_parse_error_status_nosimd
#define m0_span_ieq m0_span_ieq_nosimd
#define m0_chunked_init m0_chunked_init_nosimd
#define m0_chunked_decode m0_chunked_decode_nosimd
#include "../src/http/parser.c"

/* LeakSanitizer's defaults for the sanitizer build (TGC_SANITIZE), linked
 * into every program and library that build makes (CMakeLists.txt).
 *
 * LeakSanitizer's walk of the dynamic TLS blocks it intercepts crashes at
 * exit ("Tracer caught signal 11", the range of a block read as garbage:
 * "DTLS 11 at 0x00010000037b-0x00250000147d" with verbosity=1) once a
 * dlopen'd library with thread-local storage has run OpenMP workers:
 * oneDNN's bf16 GEMMs (runtime/backend/onednn.c) on a CPU with AVX512_BF16,
 * GCC 12's libsanitizer. Not intercepting __tls_get_addr avoids it; leak
 * checking stays on, and LSAN_OPTIONS in the environment still override.
 *
 * The runtime looks the hook up by its dynamic symbol in the program's
 * lookup scope, where the program comes first and libasan before any other
 * library: a definition in libtgc.so alone is never found (its own weak
 * default wins), so each executable carries one (sanitizer.lsan_options
 * checks the value each program sees). Compiled in that build only. */
__attribute__((visibility("default"))) const char *__lsan_default_options(void);
__attribute__((visibility("default"))) const char *__lsan_default_options(void) { return "intercept_tls_get_addr=0"; }

/* TEST_ASAN is defined when the test is built with AddressSanitizer
 * (gcc's __SANITIZE_ADDRESS__, clang's __has_feature): where reading a
 * freed handle is itself the error ASan reports, and where a test of the
 * address space's limits cannot run. */
#ifndef TGC_TEST_SANITIZER_H
#define TGC_TEST_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#endif

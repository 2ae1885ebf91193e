// Sanitizer options compiled into every executable of the sanitizer build (the command,
// the test binaries, the fuzz targets), so a run by hand or under mpirun behaves as the
// one under ctest. The environment (ASAN_OPTIONS, LSAN_OPTIONS, UBSAN_OPTIONS) still
// overrides them.
//   fast_unwind_on_malloc=0, in MPI ranks only: full allocation stacks, through
//     libraries built without frame pointers, so lsan.supp can recognise Open MPI's
//     allocations. It makes every allocation several times slower (the suite 3.6x), so
//     processes that never start MPI keep the fast unwinder.
//   allocator_may_return_null=1: an allocation too large for the machine fails as it
//     does in a normal build (nullptr, std::bad_alloc) and is reported by the code that
//     asked, instead of aborting in the sanitizer.
//   detect_stack_use_after_return, strict_string_checks, check_initialization_order:
//     checks ASan leaves off by default.
//   intercept_tls_get_addr=0: up to LLVM 16 (Debian 12 ships clang 14) the runtime's
//     __tls_get_addr interceptor takes a dynamic-TLS block whose start lies at offset
//     sizeof(Glibc_2_19_tls_header) in its page for a pre-2.25 glibc block and reads the
//     two words before it as an address and a length; at exit LeakSanitizer's tracer
//     then faults ("Tracer caught signal 11 ... LeakSanitizer has encountered a fatal
//     error") with no leak found. Open MPI's dlopen'ed components carry dynamic TLS, so
//     MPI ranks hit it: Probe and Mesh/ExecuteCpu failed so in CI, twice in a row each,
//     since the heap layout that triggers it repeats (google/sanitizers#1322,
//     Mudlet/Mudlet#9930). Static TLS and thread stacks are still scanned.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

// mpirun (Open MPI) sets OMPI_COMM_WORLD_SIZE in every rank's environment. The sanitizer
// asks for its options before libc has set up getenv and before its own shadow memory
// exists, so the environment is read from /proc with raw system calls, by code that is
// not instrumented and calls no library function.
__attribute__((no_sanitize("address", "undefined"))) bool is_mpi_rank() {
  static char buffer[1 << 16];
  static const char kKey[] = "OMPI_COMM_WORLD_SIZE=";
  const long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY);
  if (fd < 0) return false;
  long size = 0;
  while (size < static_cast<long>(sizeof buffer)) {
    const long n = ::syscall(SYS_read, fd, buffer + size, sizeof buffer - size);
    if (n <= 0) break;
    size += n;
  }
  ::syscall(SYS_close, fd);
  // Each entry starts at 0 or after a NUL.
  for (long at = 0; at < size; ++at) {
    if (at > 0 && buffer[at - 1] != '\0') continue;
    long k = 0;
    while (kKey[k] != '\0' && at + k < size && buffer[at + k] == kKey[k]) ++k;
    if (kKey[k] == '\0') return true;
  }
  return false;
}

}  // namespace

extern "C" __attribute__((no_sanitize("address", "undefined"))) const char*
__asan_default_options() {
  if (is_mpi_rank()) {
    return "fast_unwind_on_malloc=0:allocator_may_return_null=1:intercept_tls_get_addr=0:"
           "detect_stack_use_after_return=1:strict_string_checks=1:"
           "check_initialization_order=1";
  }
  return "allocator_may_return_null=1:intercept_tls_get_addr=0:detect_stack_use_after_return=1:"
         "strict_string_checks=1:check_initialization_order=1";
}

extern "C" const char* __lsan_default_options() {
  return "suppressions=" SHARDPLAN_LSAN_SUPPRESSIONS ":print_suppressions=0";
}

extern "C" const char* __ubsan_default_options() {
  return "print_stacktrace=1";
}

#ifndef C_PARLEY_FUZZ_H
#define C_PARLEY_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* libFuzzer's driver (compiler-rt, FuzzerInterface.h). It exists only in a binary linked
   with -sanitize=fuzzer; ParleyFuzz calls it only when built with -DPARLEY_FUZZ. Parley's
   own main runs it, so that libFuzzer's main is never linked in. */
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

#endif

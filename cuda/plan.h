// A recorded decode step: the op sequence encoded once by TypeScript (src/plan.ts) and run
// natively in one FFI call (eager-native / CPU replay) or captured into a CUDA graph.
//
// Encoding: PLAN_SLOTS int64 per op. slot 0 = OpCode; slots 1.. = the op_* arguments in signature
// order (ops.h): pointers and ints as int64, a float as its IEEE-754 bit pattern in the low 32 bits.
#pragma once
#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PLAN_SLOTS = 16 };

typedef enum OpCode {
  OP_EMBED = 1,
  OP_LAYERNORM = 2,
  OP_LINEAR = 3,
  OP_KV_APPEND = 4,
  OP_ATTENTION = 5,
  OP_GELU = 6,
  OP_RESIDUAL = 7,
  OP_LM_HEAD = 8,
  OP_ARGMAX = 9,
  OP_COUNT = 10
} OpCode;

typedef struct Plan Plan;

// Copies n_ops records; returns NULL if an opcode is unknown.
Plan* plan_create(const int64_t* records, int n_ops);
void plan_destroy(Plan* plan);
int plan_ops(const Plan* plan);
// Runs (CPU) or launches (CUDA, on the current stream) every op in order; returns the backend's error code.
int plan_run(const Plan* plan);
// Runs one op record (used by plan_run).
void plan_dispatch(const int64_t* record);

#ifdef __cplusplus
}
#endif

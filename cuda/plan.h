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

// OP_EMBED, OP_LAYERNORM, …: the opcodes of src/ops.ts (build/include/op_table.h); PLAN_SLOTS comes from there too.
#define PLAN_OP_ENUM(name, function, code, type) name = code,
typedef enum OpCode { DECODE_OPS(PLAN_OP_ENUM) } OpCode;
#undef PLAN_OP_ENUM

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

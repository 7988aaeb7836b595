// The op table shared by every backend library: decodes a plan record and calls its op_*.
#include "plan.h"
#include "runtime.h"

#include <stdlib.h>
#include <string.h>
#include <vector>

struct Plan {
  std::vector<int64_t> records;  // (n_ops, PLAN_SLOTS)
};

template <typename T> static T* as_ptr(int64_t slot) { return reinterpret_cast<T*>(static_cast<intptr_t>(slot)); }
static int as_int(int64_t slot) { return static_cast<int>(slot); }
static float as_float(int64_t slot) {
  uint32_t bits = static_cast<uint32_t>(slot);
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

extern "C" void plan_dispatch(const int64_t* r) {
  switch (r[0]) {
    case OP_EMBED:
      op_embed(as_ptr<float>(r[1]), as_ptr<const int>(r[2]), as_ptr<const int>(r[3]), as_ptr<const float>(r[4]),
               as_ptr<const float>(r[5]), as_int(r[6]), as_int(r[7]));
      break;
    case OP_LAYERNORM:
      op_layernorm(as_ptr<float>(r[1]), as_ptr<const float>(r[2]), as_ptr<const float>(r[3]), as_ptr<const float>(r[4]),
                   as_int(r[5]), as_int(r[6]), as_float(r[7]));
      break;
    case OP_LINEAR:
      op_linear(as_ptr<float>(r[1]), as_ptr<const float>(r[2]), as_ptr<const float>(r[3]), as_ptr<const float>(r[4]),
                as_int(r[5]), as_int(r[6]), as_int(r[7]));
      break;
    case OP_KV_APPEND:
      op_kv_append(as_ptr<float>(r[1]), as_ptr<float>(r[2]), as_ptr<const float>(r[3]), as_ptr<const int>(r[4]),
                   as_int(r[5]), as_int(r[6]), as_int(r[7]));
      break;
    case OP_ATTENTION:
      op_attention(as_ptr<float>(r[1]), as_ptr<float>(r[2]), as_ptr<const float>(r[3]), as_ptr<const float>(r[4]),
                   as_ptr<const float>(r[5]), as_ptr<const int>(r[6]), as_int(r[7]), as_int(r[8]), as_int(r[9]),
                   as_int(r[10]));
      break;
    case OP_GELU:
      op_gelu(as_ptr<float>(r[1]), as_ptr<const float>(r[2]), as_int(r[3]));
      break;
    case OP_RESIDUAL:
      op_residual(as_ptr<float>(r[1]), as_ptr<const float>(r[2]), as_ptr<const float>(r[3]), as_int(r[4]));
      break;
    case OP_LM_HEAD:
      op_lm_head(as_ptr<float>(r[1]), as_ptr<const float>(r[2]), as_ptr<const float>(r[3]), as_int(r[4]), as_int(r[5]),
                 as_int(r[6]));
      break;
    case OP_ARGMAX:
      op_argmax(as_ptr<int>(r[1]), as_ptr<int>(r[2]), as_ptr<const float>(r[3]), as_int(r[4]), as_int(r[5]),
                as_int(r[6]));
      break;
  }
}

extern "C" Plan* plan_create(const int64_t* records, int n_ops) {
  if (n_ops < 0) return nullptr;
  for (int i = 0; i < n_ops; i++) {
    int64_t op = records[(size_t)i * PLAN_SLOTS];
    if (op < OP_EMBED || op >= OP_COUNT) return nullptr;
  }
  Plan* plan = new Plan;
  plan->records.assign(records, records + (size_t)n_ops * PLAN_SLOTS);
  return plan;
}

extern "C" void plan_destroy(Plan* plan) { delete plan; }

extern "C" int plan_ops(const Plan* plan) { return (int)(plan->records.size() / PLAN_SLOTS); }

extern "C" int plan_run(const Plan* plan) {
  const int n = plan_ops(plan);
  for (int i = 0; i < n; i++) plan_dispatch(&plan->records[(size_t)i * PLAN_SLOTS]);
  return be_last_error();
}

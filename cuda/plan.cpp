// The op table shared by every backend library: decodes a plan record and calls its op_*.
// The list of ops is DECODE_OPS (build/include/op_table.h, generated from src/ops.ts); each op's
// arguments are decoded from its slots by the types of its prototype in ops.h.
#include "plan.h"
#include "runtime.h"

#include <string.h>

#include <type_traits>
#include <utility>
#include <vector>

// Every prototype in ops.h is the one src/ops.ts declares.
#define PLAN_CHECK_PROTOTYPE(name, function, code, type)  \
  static_assert(std::is_same_v<decltype(function), type>, \
                #function " in cuda/ops.h differs from its row in src/ops.ts");
DECODE_OPS(PLAN_CHECK_PROTOTYPE)
#undef PLAN_CHECK_PROTOTYPE

struct Plan {
  std::vector<int64_t> records;  // (n_ops, PLAN_SLOTS)
};

namespace {

// One slot as the parameter type T: a pointer or an int as the integer it holds, a float as its bit pattern.
template <typename T> T decode_slot(int64_t slot) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<T>(static_cast<intptr_t>(slot));
  } else if constexpr (std::is_same_v<T, float>) {
    const uint32_t bits = static_cast<uint32_t>(slot);
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
  } else {
    static_assert(std::is_same_v<T, int>, "op parameters are pointers, ints or floats");
    return static_cast<int>(slot);
  }
}

template <typename... Params, size_t... I>
void call_with_slots(void (*op)(Params...), const int64_t* slots, std::index_sequence<I...>) {
  op(decode_slot<Params>(slots[I])...);
}

// Calls op with its arguments decoded from slots[0], slots[1], … in signature order.
template <typename... Params> void call_with_slots(void (*op)(Params...), const int64_t* slots) {
  static_assert(sizeof...(Params) < PLAN_SLOTS, "an op's arguments fit a plan record after its opcode");
  call_with_slots(op, slots, std::index_sequence_for<Params...>{});
}

bool known_opcode(int64_t code) {
  switch (code) {
#define PLAN_KNOWN(name, function, opcode, type) case name:
    DECODE_OPS(PLAN_KNOWN)
#undef PLAN_KNOWN
    return true;
    default: return false;
  }
}

}  // namespace

extern "C" void plan_dispatch(const int64_t* r) {
  switch (r[0]) {
#define PLAN_CALL(name, function, code, type) \
  case name: call_with_slots(function, r + 1); break;
    DECODE_OPS(PLAN_CALL)
#undef PLAN_CALL
  }
}

extern "C" Plan* plan_create(const int64_t* records, int n_ops) {
  if (n_ops < 0) return nullptr;
  for (int i = 0; i < n_ops; i++)
    if (!known_opcode(records[(size_t)i * PLAN_SLOTS])) return nullptr;
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

// The persistent step's task list (cuda/persistent.cu): while cu_graph_capture records a plan for the persistent
// launch mode, a fused decode op's launch (cuda/dispatch.h launch_step_op) appends its task (the kernel body, its
// grid of virtual blocks, its arguments) instead of launching. Every other launch, and a variant the persistent
// kernel is not built for, makes the recording fail.
#pragma once
#include <string.h>

#include <vector>

#include "launch.h"

constexpr int kStepNone = -1;  // an op without weights, a cache or rows; a body every architecture's step runs

// The architectures whose decode step has a persistent kernel of its own: each instantiation holds only its
// architecture's bodies, so one family's bodies never cost another's registers.
enum StepArch : int32_t { kStepGpt2, kStepLlama };

// The bodies the persistent step kernel runs (each the 16-byte variant of its op's kernel), with the architecture
// whose step runs them: one list for the kinds and for the switches over them (cuda/persistent.cu).
#define STEP_TASK_KINDS(X)          \
  X(kTaskEmbed, kStepNone)          \
  X(kTaskLnQkv, kStepGpt2)          \
  X(kTaskAttention, kStepNone)      \
  X(kTaskLnLinearGelu, kStepGpt2)   \
  X(kTaskLinearResidual, kStepNone) \
  X(kTaskLnLmHeadArgmax, kStepGpt2) \
  X(kTaskRmsQkvRope, kStepLlama)    \
  X(kTaskRmsGateUp, kStepLlama)     \
  X(kTaskRmsLmHeadArgmax, kStepLlama)
#define STEP_TASK_ENUMERATOR(kind, arch) kind,
enum StepTaskKind : int32_t { STEP_TASK_KINDS(STEP_TASK_ENUMERATOR) };
#undef STEP_TASK_ENUMERATOR

// The architecture whose step runs a body (kStepNone: every one's).
constexpr int step_arch_of(StepTaskKind kind) {
#define STEP_TASK_ARCH(k, arch) \
  if (kind == k) return arch;
  STEP_TASK_KINDS(STEP_TASK_ARCH)
#undef STEP_TASK_ARCH
  return kStepNone;
}

constexpr int kStepTaskArgBytes = 144;  // the largest of the bodies' argument structs (cuda/persistent.cu asserts it)

// One task: `kind`'s body over the virtual blocks of `grid`, with the argument struct in `args`.
struct StepTask {
  int32_t kind;
  dim3 grid;
  alignas(16) unsigned char args[kStepTaskArgBytes];
};

// What the step's kernel is instantiated for: the weights' and the cache's storage types, the rows each body
// accumulates (batch_bucket of the batch), and the architecture (StepArch).
struct StepVariant {
  int wdtype = kStepNone, kvdtype = kStepNone, rows = kStepNone, arch = kStepNone;
};

// A fused decode op's task form: the body that runs it, whether the launcher chose the 16-byte variant (the only
// one the step kernel runs), and the variant it needs (kStepNone where it has no weights, cache or rows).
struct StepTaskForm {
  StepTaskKind kind;
  bool vec;
  StepVariant variant;
};

// The tasks of one plan, and whether every launch of it could be recorded as one.
class StepRecorder {
 public:
  // Appends a task over the virtual blocks of `grid`; its variant must agree with every other task's.
  template <typename Args> void add(const StepTaskForm& form, dim3 grid, const Args& args) {
    static_assert(sizeof(Args) <= kStepTaskArgBytes, "a body's arguments fit a task");
    const StepVariant& v = form.variant;
    if (!form.vec || !agree(variant_.wdtype, v.wdtype) || !agree(variant_.kvdtype, v.kvdtype) ||
        !agree(variant_.rows, v.rows) || !agree(variant_.arch, v.arch)) {
      supported_ = false;
      return;
    }
    StepTask task = {};
    task.kind = form.kind;
    task.grid = grid;
    memcpy(task.args, &args, sizeof args);
    tasks_.push_back(task);
  }
  // A launch with no task form (an unfused op, a prefill's tiled matvec, ...).
  void reject() { supported_ = false; }

  bool supported() const {
    return supported_ && !tasks_.empty() && variant_.wdtype != kStepNone && variant_.rows != kStepNone &&
           variant_.arch != kStepNone;
  }
  const std::vector<StepTask>& tasks() const { return tasks_; }
  const StepVariant& variant() const { return variant_; }

 private:
  static bool agree(int& slot, int value) {  // the first op to name a value sets it
    if (value == kStepNone) return true;
    if (slot == kStepNone) slot = value;
    return slot == value;
  }
  std::vector<StepTask> tasks_;
  StepVariant variant_;
  bool supported_ = true;
};

// The recorder while cu_graph_capture records a persistent step (cuda/runtime.cu); null otherwise.
StepRecorder* rt_step_recorder();

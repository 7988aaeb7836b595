// The persistent step's task list (cuda/persistent.cu): while cu_graph_capture records a plan for the persistent
// launch mode, a fused decode op's launch (cuda/dispatch.h launch_step_op) appends its task (the kernel body, its
// grid of virtual blocks, its arguments) instead of launching. Every other launch, and a variant the persistent
// kernel is not built for, makes the recording fail.
#pragma once
#include <string.h>

#include <vector>

#include "launch.h"

// The bodies the persistent step kernel runs (each the 16-byte variant of its op's kernel): one list for the kinds
// and for the switches over them (cuda/persistent.cu).
#define STEP_TASK_KINDS(X) \
  X(kTaskEmbed)            \
  X(kTaskLnQkv)            \
  X(kTaskAttention)        \
  X(kTaskLnLinearGelu)     \
  X(kTaskLinearResidual)   \
  X(kTaskLnLmHeadArgmax)
#define STEP_TASK_ENUMERATOR(kind) kind,
enum StepTaskKind : int32_t { STEP_TASK_KINDS(STEP_TASK_ENUMERATOR) };
#undef STEP_TASK_ENUMERATOR

constexpr int kStepTaskArgBytes = 128;  // the largest of the bodies' argument structs (cuda/persistent.cu asserts it)

// One task: `kind`'s body over the virtual blocks of `grid`, with the argument struct in `args`.
struct StepTask {
  int32_t kind;
  dim3 grid;
  alignas(16) unsigned char args[kStepTaskArgBytes];
};

constexpr int kStepNone = -1;  // an op without weights, a cache or rows

// What the step's kernel is instantiated for: the weights' and the cache's storage types, and the rows each body
// accumulates (batch_bucket of the batch).
struct StepVariant {
  int wdtype = kStepNone, kvdtype = kStepNone, rows = kStepNone;
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
        !agree(variant_.rows, v.rows)) {
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
    return supported_ && !tasks_.empty() && variant_.wdtype != kStepNone && variant_.rows != kStepNone;
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

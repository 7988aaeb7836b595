// The persistent step's task list (cuda/persistent.cu): while cu_graph_capture records a plan for the persistent
// launch mode, the launchers of the fused decode ops (cuda/embed.cu, linear.cu, attention.cu, lm_head.cu) append
// their launch as a task (the kernel body, its grid of virtual blocks, its arguments) instead of launching it. Every
// other launch, and a variant the persistent kernel is not built for, makes the recording fail.
#pragma once
#include <string.h>

#include <vector>

#include "launch.h"

// The bodies the persistent step kernel runs (each the 16-byte variant of its op's kernel).
enum StepTaskKind : int32_t { kTaskEmbed, kTaskLnQkv, kTaskAttention, kTaskLnLinearGelu, kTaskLinearResidual, kTaskLnLmHeadArgmax };

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

// The tasks of one plan, and whether every launch of it could be recorded as one.
class StepRecorder {
 public:
  // Appends a task; `vec` is whether the launcher chose the 16-byte variant (the only one the step kernel runs).
  // wdtype, kvdtype, rows: this op's storage types and batch bucket (kStepNone where it has none); they must agree
  // with every other task's.
  template <typename Args> void add(StepTaskKind kind, dim3 grid, const Args& args, bool vec, int wdtype, int kvdtype, int rows) {
    static_assert(sizeof(Args) <= kStepTaskArgBytes, "a body's arguments fit a task");
    if (!vec || !agree(variant_.wdtype, wdtype) || !agree(variant_.kvdtype, kvdtype) || !agree(variant_.rows, rows)) {
      supported_ = false;
      return;
    }
    StepTask task = {};
    task.kind = kind;
    task.grid = grid;
    memcpy(task.args, &args, sizeof args);
    tasks_.push_back(task);
  }
  // A launch with no task form (an unfused op, a prefill's tiled matvec, ...).
  void reject() { supported_ = false; }

  bool supported() const { return supported_ && !tasks_.empty() && variant_.wdtype != kStepNone && variant_.rows != kStepNone; }
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

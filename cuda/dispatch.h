// The one place that knows the launch modes. An op's launcher works out its kernel, geometry and arguments and
// hands them to launch_op (launch_step_op for a fused decode op, which also has a task form); what that means is
// the mode's, set by cu_graph_capture (cuda/runtime.cu) while it captures a step:
//   eager, graph      the kernel launched on the current stream
//   graph-pdl         launched with programmatic stream serialization, so it may overlap its predecessor; a
//                     kernel whose last parameter is an Overlap is told so, and pins its early loads before the wait
//   persistent        the op's task recorded instead (cuda/step_tasks.h); an op without one fails the recording
#pragma once
#include <tuple>
#include <type_traits>

#include "launch.h"
#include "step_tasks.h"

struct Geometry {
  dim3 grid, block;
};

// A kernel given one argument fewer than it has parameters takes the mode's Overlap last.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), const Geometry& at, Args&&... args) {
  rt_note_shape(at.grid, at.block);
  if constexpr (sizeof...(Params) == sizeof...(Args) + 1) {
    static_assert(std::is_same_v<std::tuple_element_t<sizeof...(Args), std::tuple<Params...>>, Overlap>,
                  "the parameter the launcher leaves out is the Overlap");
    launch_on(rt_current_stream(), kernel, at.grid, at.block, std::forward<Args>(args)..., rt_overlapped());
  } else {
    launch_on(rt_current_stream(), kernel, at.grid, at.block, std::forward<Args>(args)...);
  }
  rt_note_launch();
}

// An op with no task form.
template <typename... Params, typename... Args>
void launch_op(void (*kernel)(Params...), const Geometry& at, Args&&... args) {
  if (StepRecorder* step = rt_step_recorder()) return step->reject();
  launch_kernel(kernel, at, std::forward<Args>(args)...);
}

// A fused decode op: its kernel takes one argument struct, which is also its task's.
template <typename... Params, typename Args>
void launch_step_op(void (*kernel)(Params...), const Geometry& at, const StepTaskForm& task, const Args& args) {
  if (StepRecorder* step = rt_step_recorder()) return step->add(task, at.grid, args);
  launch_kernel(kernel, at, args);
}

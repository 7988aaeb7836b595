// SwiGLU's gate on the device: used by op_swiglu (elementwise.cu) and the fused op_rms_gate_up (linear.cu).
#pragma once
#include <math.h>

// silu(g) = g / (1 + e^-g)
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// The CUDA kernels of device/cuda/grad_ops.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "device/cuda/grad_ops.cu"  // NOLINT(bugprone-suspicious-include)

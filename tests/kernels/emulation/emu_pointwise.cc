// The CUDA kernels of kernels/cuda/pointwise.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/pointwise.cu"  // NOLINT(bugprone-suspicious-include)

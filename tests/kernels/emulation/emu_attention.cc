// The CUDA kernels of kernels/cuda/attention.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/attention.cu"  // NOLINT(bugprone-suspicious-include)
